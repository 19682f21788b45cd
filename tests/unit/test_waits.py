"""spark_jobs.waits.poll: the deadline loop the lake's commands share."""

from __future__ import annotations

import pytest

from spark_jobs.waits import poll


def test_poll_returns_the_first_result_that_is_not_none() -> None:
    answers = iter([None, None, "ready"])
    waited: list[float] = []
    assert poll(lambda: next(answers), timeout=60, every=0, on_wait=waited.append) == "ready"
    assert len(waited) == 2  # one progress call before each of the two sleeps


def test_poll_gives_none_once_the_deadline_passed() -> None:
    calls: list[int] = []

    def never() -> None:
        calls.append(1)

    assert poll(never, timeout=0, every=0) is None
    assert calls == [1]  # a zero deadline still checks once


def test_an_error_in_the_check_is_raised_at_once() -> None:
    def broken() -> None:
        raise ValueError("slot query failed")

    with pytest.raises(ValueError, match="slot query failed"):
        poll(broken, timeout=60, every=0)
