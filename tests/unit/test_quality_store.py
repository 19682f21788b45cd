"""Writes of ``ops.dq_results`` and ``quarantine.dq_*``: a write that lost a commit race is retried, others fail."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from spark_jobs.quality import store

# As a gold task sees it over Spark Connect when two tasks create ops.dq_results at once (CI log, 2026-11-25).
PROTOCOL_CHANGED = ("(io.delta.exceptions.ProtocolChangedException) [DELTA_PROTOCOL_CHANGED] ProtocolChangedException: "
                    "The protocol version of the Delta table has been changed by a concurrent update. This happens "
                    "when multiple writers are writing to an empty directory.")


class UnknownException(Exception):  # the class name pyspark's Connect client gives a JVM error it does not map
    pass


def _flaky(errors: list[Exception]) -> tuple[list[int], Callable[[], None]]:
    calls: list[int] = []

    def write() -> None:
        calls.append(1)
        if errors:
            raise errors.pop(0)

    return calls, write


@pytest.mark.parametrize("error", [UnknownException(PROTOCOL_CHANGED),
                                   UnknownException("[DELTA_CONCURRENT_APPEND] ConcurrentAppendException: Files "
                                                    "were added to the root of the table by a concurrent update.")])
def test_a_write_that_lost_a_commit_race_is_retried(error: Exception, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("spark_jobs.quality.store.time.sleep", lambda s: None)
    calls, write = _flaky([error, error])
    store._with_retries(write)
    assert len(calls) == 3


def test_other_errors_and_the_last_attempt_are_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("spark_jobs.quality.store.time.sleep", lambda s: None)
    calls, write = _flaky([UnknownException("[TABLE_OR_VIEW_NOT_FOUND] ops.dq_results")])
    with pytest.raises(UnknownException, match="TABLE_OR_VIEW_NOT_FOUND"):
        store._with_retries(write)
    assert len(calls) == 1
    calls, write = _flaky([UnknownException(PROTOCOL_CHANGED) for _ in range(store.WRITE_ATTEMPTS)])
    with pytest.raises(UnknownException, match="DELTA_PROTOCOL_CHANGED"):
        store._with_retries(write)
    assert len(calls) == store.WRITE_ATTEMPTS
