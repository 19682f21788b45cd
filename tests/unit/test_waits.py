"""spark_jobs.waits: the deadline loops (poll, poll_until) and retries (retrying) the lake's commands share."""

from __future__ import annotations

from collections.abc import Iterator

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


def test_poll_until_returns_the_awaited_result_or_the_last_one_at_the_deadline() -> None:
    from spark_jobs.waits import poll_until

    states = iter(["STARTING", "STOPPING", "STOPPED", "never asked"])
    seen: list[tuple[float, str]] = []
    got = poll_until(lambda: next(states), lambda st: st == "STOPPED", timeout=60, every=0,
                     on_wait=lambda waited, st: seen.append((waited, st)))
    assert got == "STOPPED" and [st for _, st in seen] == ["STARTING", "STOPPING"]
    assert all(waited >= 0 for waited, _ in seen)
    calls: list[int] = []

    def stuck() -> str:
        calls.append(1)
        return f"STOPPING {len(calls)}"

    assert poll_until(stuck, lambda st: st == "STOPPED", timeout=0.05, every=0.01) == f"STOPPING {len(calls)}"
    assert len(calls) >= 2
    with pytest.raises(ValueError, match="no answer"):
        poll_until(lambda: (_ for _ in ()).throw(ValueError("no answer")), bool, timeout=60, every=0)


def test_retrying_retries_the_named_errors_until_it_works() -> None:
    from spark_jobs.waits import retrying

    tries: list[BaseException] = []
    answers: Iterator[BaseException | str] = iter([OSError("refused"), LookupError("starting"), "up"])

    def call() -> str:
        answer = next(answers)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    assert retrying(call, (OSError, LookupError), every=0, timeout=60, on_retry=tries.append) == "up"
    assert [str(e) for e in tries] == ["refused", "starting"]


def test_retrying_raises_other_errors_at_once_and_the_last_one_when_time_is_up() -> None:
    from spark_jobs.waits import retrying

    calls: list[int] = []

    def fails(message: str) -> None:
        calls.append(1)
        raise RuntimeError(f"{message} {len(calls)}")

    with pytest.raises(RuntimeError, match="HTTP 500 1"):
        retrying(lambda: fails("HTTP 500"), lambda exc: "HTTP 404" in str(exc), every=0, timeout=60)
    calls.clear()
    with pytest.raises(RuntimeError, match=r"HTTP 404 (\d+)") as last:
        retrying(lambda: fails("HTTP 404"), lambda exc: "HTTP 404" in str(exc), every=0.01, timeout=0.05)
    assert len(calls) >= 2 and str(last.value) == f"HTTP 404 {len(calls)}"
    with pytest.raises(ValueError, match="a timeout or a number of attempts"):
        retrying(lambda: None, OSError, every=0)


def test_retrying_a_number_of_attempts_with_growing_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    from spark_jobs.waits import retrying

    slept: list[float] = []
    monkeypatch.setattr(time, "sleep", slept.append)
    calls: list[int] = []

    def down() -> None:
        calls.append(1)
        raise ConnectionError(f"try {len(calls)}")

    with pytest.raises(ConnectionError, match="try 3"):
        retrying(down, ConnectionError, every=2, increment=3, attempts=3)
    assert slept == [2, 5] and len(calls) == 3
