"""`lake stack status` against Kafka retention: the stream stopped with records it has not archived warns, then
fails once the thresholds are passed (docs/operations.md, Retention: Kafka and the bronze archive).

The records are real (produced to events.clickstream while the stream is stopped), and so are the topic's
retention.ms/retention.bytes (read from the broker) and the records' age; what makes seconds count like days is
the thresholds, LAKE_RETENTION_WARN_FRACTION/_FAIL_FRACTION, set per call in the environment. Nothing changes a
topic's retention (a tiny retention.ms on a lake topic would delete records bronze has not archived). The
stream is started again and drained in a ``finally``.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest

from spark_jobs.contracts.clickstream import TOPIC
from spark_jobs.settings import Settings
from tests.integration.lakehelpers import run_lake, wait_stream

TINY = "0.0000001"  # 0.06 s of a 7-day retention.ms


def _status(warn: str, fail: str) -> tuple[int, dict[str, Any], str]:
    env = {"LAKE_RETENTION_WARN_FRACTION": warn, "LAKE_RETENTION_FAIL_FRACTION": fail}
    proc = run_lake("stack", "status", "--json", env=env, check=False, timeout=300)
    return proc.returncode, json.loads(proc.stdout), proc.stderr


def test_stopped_stream_warns_then_fails_near_retention(stack: Settings) -> None:
    run_lake("connectors", "apply")
    run_lake("stream", "start")
    try:
        run_lake("stream", "stop")
        run_lake("loadgen", "events", "--rate", "200", "--duration", "2", "--seed", "3232", "--users", "50")

        code, report, err = _status(TINY, "1.0")
        warnings = [w for w in report["warnings"] if isinstance(w, str) and w.startswith(f"{TOPIC}:")]
        assert code == 0 and report["ok"], (code, report["stream"], err[-2000:])
        assert warnings, report["warnings"]
        assert "record(s) not archived" in warnings[0] and "LAKE_RETENTION_WARN_FRACTION" in warnings[0], warnings
        partitions = report["retention"]["partitions"]
        behind = {tp: p for tp, p in partitions.items() if tp.startswith(f"{TOPIC}:") and p["behind"]}
        assert behind and all(p["retention_ms"] > 0 and p["age_s"] is not None for p in behind.values()), partitions

        code, report, err = _status(TINY, TINY)
        stream = report["stream"]
        assert code == 1 and not report["ok"], (code, stream, err[-2000:])
        assert not stream["healthy"] and "LAKE_RETENTION_FAIL_FRACTION" in stream["detail"], stream
        assert "Kafka is about to delete records the stream has not archived" in stream["detail"], stream
    finally:
        run_lake("stream", "start")
        wait_stream(600)

    code, report, err = _status(TINY, TINY)  # caught up: nothing behind, nothing at risk
    assert not report["retention"]["failures"], report["retention"]


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-v"]))
