"""``lake stream start|stop|status|wait``: control the streaming app under the stack's supervisor, and observe it
(its progress against Kafka: :mod:`spark_jobs.streaming.progress`)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from spark_jobs.contracts.shop import CDC_TABLES
from spark_jobs.session import STREAM_PROGRAM
from spark_jobs.settings import Settings
from spark_jobs.stack import supervisor
from spark_jobs.stack.connectors import slot_positions
from spark_jobs.stack.errors import StackError
from spark_jobs.streaming.common import read_json, status_path
from spark_jobs.streaming.progress import kafka_end_offsets, processed_offsets
from spark_jobs.waits import poll

PROGRAM = STREAM_PROGRAM

log = logging.getLogger(__name__)


def start(settings: Settings) -> None:
    if supervisor.daemon_pid(settings) is None:
        raise StackError("the stack is not running; start it with `lake stack up`")
    supervisor.start_program(settings, PROGRAM)
    info = supervisor.program_info(settings, PROGRAM) or {}
    log.info("lake stream: %s (pid %s); log %s", info.get("statename", "?"), info.get("pid"),
             supervisor.log_path(settings, PROGRAM))


def stop(settings: Settings) -> None:
    if supervisor.daemon_pid(settings) is not None:
        supervisor.stop_program(settings, PROGRAM)
    log.info("lake stream: stopped")


def _lag(ends: dict[str, int], done: dict[str, Any], topic: str) -> int:
    """Records of ``topic`` not yet processed: Kafka's end offsets (``ends``) against the last processed ones."""
    return sum(max(0, high - (int(done.get(tp, -1)) + 1)) for tp, high in ends.items() if tp.startswith(topic + ":"))


def report(settings: Settings) -> dict[str, Any]:
    """Per table: last committed batch, Kafka lag, age of the newest applied change."""
    progress: dict[str, Any] = read_json(status_path(settings)) or {}
    ends = kafka_end_offsets(settings)
    done = progress.get("offsets", {})
    info = supervisor.program_info(settings, PROGRAM) if supervisor.daemon_pid(settings) else None
    now = datetime.now(UTC)
    tables = {}
    for topic, contract in CDC_TABLES.items():
        lag = _lag(ends, done, topic)
        t = progress.get("tables", {}).get(contract.silver, {})
        newest = t.get("newest_change")
        tables[contract.silver] = {
            "topic": topic,
            "last_batch": t.get("last_batch"),
            "kafka_lag": lag,
            "changes_applied": t.get("changes_applied", 0),
            "newest_change": newest,
            "newest_change_age_s": round((now - datetime.fromisoformat(newest)).total_seconds(), 1) if newest else None,
        }
    from spark_jobs.contracts.clickstream import TOPIC
    from spark_jobs.streaming.archive import SILVER, events_status_path

    ev = read_json(events_status_path(settings)) or {}
    ev_done = ev.get("offsets", {})
    if "events" in settings.stream_query_list:
        tables[SILVER] = {
            "topic": TOPIC,
            "last_batch": ev.get("batch_id"),
            "kafka_lag": _lag(ends, ev_done, TOPIC),
            "committed_at": ev.get("committed_at"),
            "watermark": ev.get("watermark"),
            "totals": ev.get("totals", {}),
        }
        from spark_jobs.streaming.hot import hot_status_path

        hot = read_json(hot_status_path(settings)) or {}
        hot_done = hot.get("offsets", {})
        tables["hot.*"] = {
            "topic": TOPIC,
            "last_batch": hot.get("batch_id"),
            "kafka_lag": _lag(ends, hot_done, TOPIC),
            "committed_at": hot.get("committed_at"),
            "batch_seconds": hot.get("batch_seconds"),
        }
    return {
        "running": bool(info and info.get("statename") in ("RUNNING", "STARTING")),
        "pid": (info or {}).get("pid") or None,
        "last_batch": progress.get("batch_id"),
        "committed_at": progress.get("committed_at"),
        "tables": tables,
    }


def total_lag(settings: Settings) -> int:
    """Records in the app's topics it has not processed yet (every query: the lower of the archive and hot)."""
    done = processed_offsets(settings)
    return sum(max(0, high - (int(done.get(tp, -1)) + 1)) for tp, high in kafka_end_offsets(settings).items())


def wait(settings: Settings, timeout: float, progress: Callable[[int], None] | None = None) -> bool:
    """Block until every change committed in PostgreSQL before the call is in silver.

    ``progress`` gets the records still to apply at each poll (a progress bar).

    1. Debezium has confirmed the replication slot past the WAL position of the call;
    2. the streaming app has processed every Kafka offset that existed after step 1.
    """
    deadline = time.monotonic() + timeout
    start = slot_positions(settings)
    if start is not None:
        target_lsn = start[0]
        now: tuple[int, int] | None = None

        def confirmed() -> bool | None:
            nonlocal now
            now = slot_positions(settings)
            return True if now and now[1] >= target_lsn else None

        if poll(confirmed, timeout, every=1.0) is None:
            log.warning("lake stream wait: Debezium has not confirmed WAL up to %s (slot at %s); is the "
                        "connector running? (lake connectors status)", target_lsn, now[1] if now else "?")
            return False
    ends = kafka_end_offsets(settings)
    behind: dict[Any, int] = {}
    last_report = time.monotonic()

    def caught_up() -> bool | None:
        nonlocal behind, last_report
        done = processed_offsets(settings)
        behind = {tp: high - (int(done.get(tp, -1)) + 1) for tp, high in ends.items()
                  if high - (int(done.get(tp, -1)) + 1) > 0}
        if progress is not None:
            progress(sum(behind.values()))
        if behind and time.monotonic() - last_report > 10:
            log.info("lake stream wait: %d record(s) to go", sum(behind.values()))
            last_report = time.monotonic()
        return True if not behind else None

    if poll(caught_up, deadline - time.monotonic(), every=0.5) is None:
        log.warning("lake stream wait: timed out with lag %s; see `lake stream status` and %s", behind,
                    supervisor.log_path(settings, PROGRAM))
        return False
    return True


class SupervisedStream:
    """The streaming app under the stack's supervisor, as a replay's switch stops and restarts it
    (:class:`spark_jobs.replay.run.StreamControl`)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def running(self) -> bool:
        if supervisor.daemon_pid(self.settings) is None:
            return False
        info = supervisor.program_info(self.settings, PROGRAM) or {}
        return info.get("statename") in ("RUNNING", "STARTING", "BACKOFF")

    def stop(self) -> None:
        stop(self.settings)

    def start(self) -> None:
        start(self.settings)
