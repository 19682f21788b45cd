"""The streaming app's queries (one driver): CDC and events."""
