"""Polling and retrying with a deadline, on tenacity: the lake's one helper for waiting and trying again.

- :func:`poll_until`: call a check every so often until its result is what we wait for; after the deadline, the
  last result (the caller tells by it what to report). An error in the check is raised at once.
- :func:`poll`: the same, waiting for a result other than None.
- :func:`retrying`: call until it does not raise; the errors it says are passing (a type, types or a predicate)
  are tried again until the deadline or the number of attempts, then the last one is raised.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    retry_if_exception_type,
    retry_if_result,
    stop_after_attempt,
    stop_after_delay,
    stop_any,
    wait_fixed,
    wait_incrementing,
)
from tenacity.stop import stop_base

T = TypeVar("T")

#: What :func:`retrying` retries: an exception type, a tuple of them, or a predicate on the exception.
RetryOn = type[BaseException] | tuple[type[BaseException], ...] | Callable[[BaseException], bool]


def poll_until(check: Callable[[], T], done: Callable[[T], bool], timeout: float, every: float,
               on_wait: Callable[[float, T], None] | None = None) -> T:
    """Call ``check`` every ``every`` s until ``done(result)`` (that result is returned) or ``timeout`` seconds
    pass (the last result is returned: check it with ``done``). ``check`` runs at least once.
    ``on_wait`` gets the seconds waited so far and the last result before each sleep (progress lines).
    An exception from ``check`` is raised at once."""

    def before_sleep(state: RetryCallState) -> None:
        if on_wait is not None and state.outcome is not None:
            on_wait(state.seconds_since_start or 0.0, state.outcome.result())

    def last(state: RetryCallState) -> T:
        assert state.outcome is not None  # called after an attempt
        result: T = state.outcome.result()
        return result

    return Retrying(stop=stop_after_delay(max(timeout, 0.0)), wait=wait_fixed(every), reraise=True,
                    retry=retry_if_result(lambda result: not done(result)), before_sleep=before_sleep,
                    retry_error_callback=last)(check)


def poll(check: Callable[[], T | None], timeout: float, every: float,
         on_wait: Callable[[float], None] | None = None) -> T | None:
    """Call ``check`` every ``every`` s until it returns something other than None (returned), or ``timeout``
    seconds pass (None). ``on_wait`` gets the seconds waited so far before each sleep (progress lines).
    An exception from ``check`` is raised at once."""
    def progress(waited: float, _result: T | None) -> None:
        if on_wait is not None:
            on_wait(waited)

    return poll_until(check, lambda result: result is not None, timeout, every, progress)


def retrying(call: Callable[[], T], retry_on: RetryOn, every: float, timeout: float | None = None,
             attempts: int | None = None, increment: float = 0.0,
             on_retry: Callable[[BaseException], None] | None = None) -> T:
    """Call ``call`` until it returns (its result is returned). An exception ``retry_on`` matches is tried again
    after ``every`` s (growing by ``increment`` s after each try) until ``timeout`` seconds have passed or
    ``attempts`` calls were made (whichever comes first; at least one of them), then raised; any other exception
    is raised at once. ``on_retry`` gets the exception before each sleep."""
    stops: list[stop_base] = []
    if timeout is not None:
        stops.append(stop_after_delay(max(timeout, 0.0)))
    if attempts is not None:
        stops.append(stop_after_attempt(attempts))
    if not stops:
        raise ValueError("retrying needs a timeout or a number of attempts")
    retry = (retry_if_exception_type(retry_on) if isinstance(retry_on, type | tuple)
             else retry_if_exception(retry_on))

    def before_sleep(state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome is not None else None
        if on_retry is not None and exc is not None:
            on_retry(exc)

    return Retrying(stop=stop_any(*stops), reraise=True, retry=retry, before_sleep=before_sleep,
                    wait=wait_incrementing(every, increment) if increment else wait_fixed(every))(call)
