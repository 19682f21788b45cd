"""Hot tables: event-time windowed aggregates the speed layer keeps seconds fresh."""
