"""Pacing: holds the loadgen to its target rate of committed changes."""

from __future__ import annotations


class TokenBucket:
    """Token bucket in changes: ``rate`` per second, at most ``burst`` saved up.

    ``take(n)`` may go into debt (a transaction bigger than the bucket still
    runs) and returns how long to sleep so the long-run rate stays at ``rate``.
    """

    def __init__(self, rate: float, burst: float, now: float) -> None:
        if rate <= 0:
            raise ValueError(f"rate must be > 0 changes/s, got {rate}")
        self.rate = rate
        self.burst = max(burst, 1.0)
        self.tokens = self.burst
        self.last = now

    def take(self, n: float, now: float) -> float:
        """Spend ``n`` tokens at time ``now``; return the seconds to wait before proceeding."""
        self.tokens = min(self.burst, self.tokens + (now - self.last) * self.rate)
        self.last = now
        self.tokens -= n
        return 0.0 if self.tokens >= 0 else -self.tokens / self.rate
