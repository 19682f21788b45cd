"""Polling with a deadline, on tenacity: the one shape of wait the lake's commands need."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from tenacity import RetryCallState, Retrying, retry_if_result, stop_after_delay, wait_fixed

T = TypeVar("T")


def poll(check: Callable[[], T | None], timeout: float, every: float,
         on_wait: Callable[[float], None] | None = None) -> T | None:
    """Call ``check`` every ``every`` s until it returns something other than None (returned), or ``timeout``
    seconds pass (None). ``on_wait`` gets the seconds waited so far before each sleep (progress lines).
    An exception from ``check`` is raised at once."""

    def before_sleep(state: RetryCallState) -> None:
        if on_wait is not None:
            on_wait(state.seconds_since_start or 0.0)

    return Retrying(stop=stop_after_delay(max(timeout, 0.0)), wait=wait_fixed(every), reraise=True,
                    retry=retry_if_result(lambda result: result is None), before_sleep=before_sleep,
                    retry_error_callback=lambda state: None)(check)
