"""The replay against the real lake: its Spark session, catalog, owner locks, suites and Kafka (the stream to stop
for the switch is the caller's: :class:`spark_jobs.stack.stream_control.SupervisedStream`).

``lake replay`` (:mod:`spark_jobs.cli.replay`) and the ``lake_replay`` DAG (``spark-submit`` of
:mod:`spark_jobs.cli.replay_job`) both call :func:`replay` / :func:`rollback` here; :mod:`.run` holds the logic.

One replay at a time: an exclusive ``flock`` on ``<run dir>/replay.lock`` for the whole command (a second
``lake replay`` or a DAG run meanwhile is refused, naming the holder), beside the streaming queries' owner locks
taken for the switch.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import TYPE_CHECKING, Any

from spark_jobs.replay.build import Offsets
from spark_jobs.replay.run import Lake, ReplayConfig, Replayer, ReplayError, ReplayReport, StreamControl
from spark_jobs.replay.targets import ReplayTarget
from spark_jobs.settings import Settings

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

APP_NAME = "lake-replay"


def claim_queries(settings: Settings) -> Callable[[list[str]], AbstractContextManager[Any]]:
    """The streaming queries' owner locks (:mod:`spark_jobs.streaming.owner`) as a context: held, a stream driver
    started meanwhile (by hand or by the supervisor) exits at once without writing."""
    from spark_jobs.streaming.owner import QueryOwned, claim

    @contextlib.contextmanager
    def held(queries: list[str]) -> Iterator[None]:
        try:
            lock = claim(settings, queries)
        except QueryOwned as exc:
            raise ReplayError(f"the switch needs the streaming queries {queries} stopped: {exc}") from None
        try:
            yield
        finally:
            lock.release()

    return held


@contextlib.contextmanager
def one_replay(settings: Settings, what: str) -> Iterator[None]:
    """Hold ``<run dir>/replay.lock`` (one replay or rollback at a time, from the CLI or the DAG)."""
    settings.run_dir.mkdir(parents=True, exist_ok=True)
    path = settings.run_dir / "replay.lock"
    with open(path, "a+", encoding="utf-8") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            raise ReplayError(f"another replay is running ({f.read().strip() or 'unknown'}; lock {path}): wait "
                              "for it to end") from None
        f.seek(0)
        f.truncate()
        f.write(json.dumps({"pid": os.getpid(), "what": what}))
        f.flush()
        yield


def lake_for(spark: SparkSession, settings: Settings) -> Lake:
    from spark_jobs.table_io import register_table, table_location

    return Lake(spark, lambda name: table_location(settings, name),
                register=lambda name: register_table(spark, settings, name), settings=settings)


def dq_gate(spark: SparkSession, settings: Settings, run_id: str) -> Callable[..., tuple[bool, str]]:
    """The table's suite on its shadow (the live table's ``expectations/<table>.yml``, whole table). The verdict is
    printed and recorded in the replay's report; ``ops.dq_results`` is left to its own writer (the Airflow DQ
    tasks: one writer per table)."""
    from spark_jobs.quality.runner import validate_suite
    from spark_jobs.quality.suites import load_suite

    def gate(target: ReplayTarget, shadow: DataFrame, renames: dict[str, str]) -> tuple[bool, str]:
        outcome = validate_suite(spark, shadow, load_suite(target.live), interval=None, run_id=run_id,
                                 dag_id="lake_replay", task_id=f"replay.{target.live}", settings=settings,
                                 tables=renames)
        return outcome.blocked, outcome.summary()

    return gate


def kafka_range(spark: SparkSession, settings: Settings) -> Callable[[str, Offsets, Offsets], DataFrame]:
    """Records of a topic past ``after`` up to ``upto`` (last included), read from Kafka as one batch, logged in as
    the streaming app (its group prefix): the part of the log bronze does not hold yet."""
    from pyspark.sql import functions as F

    from spark_jobs import kafka_auth

    def read(topic: str, after: Offsets, upto: Offsets) -> DataFrame:
        start = {topic: {str(p): o + 1 for p, o in after.items()}}
        end = {topic: {str(p): o + 1 for p, o in upto.items()}}
        frame = (spark.read.format("kafka").options(**kafka_auth.spark_source_options(settings))
                 .option("subscribe", topic).option("startingOffsets", json.dumps(start))
                 .option("endingOffsets", json.dumps(end)).option("failOnDataLoss", "true")
                 .option("groupIdPrefix", f"{kafka_auth.SPARK_GROUP_PREFIX}replay").load())
        return frame.select("key", "value", "topic", "partition", "offset",
                            F.col("timestamp").alias("kafka_timestamp"))

    return read


def _replayer(spark: SparkSession, settings: Settings, run: str, say: Callable[[str], None], stream: StreamControl,
              gate: bool = True) -> Replayer:
    config = ReplayConfig(watermark_minutes=settings.events_watermark_minutes,
                          rollback_hours=settings.replay_rollback_hours, sample=settings.replay_diff_sample)
    return Replayer(spark, lake_for(spark, settings), config, stream, claim_queries(settings),
                    gate=dq_gate(spark, settings, run) if gate else None, kafka=kafka_range(spark, settings),
                    say=say, run=run)


def session(settings: Settings) -> SparkSession:
    from spark_jobs.session import AUTO_COMPACT_OFF, build_session

    # A replay writes each shadow in one pass, a few large files: Delta's auto compaction then rewrote all of them
    # once more (8 s of a 68 s replay of 2M events; measured, docs/benchmarks.md).
    return build_session(settings, APP_NAME, extra=AUTO_COMPACT_OFF)


def replay(settings: Settings, targets: Sequence[ReplayTarget], *, until: datetime | None, dry_run: bool,
           confirm: Callable[[ReplayReport], bool], run: str, stream: StreamControl,
           say: Callable[[str], None] = log.info) -> ReplayReport:
    """``lake replay``: build, gate, diff and (unless ``dry_run`` or not confirmed) switch ``targets``; ``stream``
    is the running streaming app the switch stops and restarts (the caller's: the supervised one for ``lake``
    and the DAG)."""
    with one_replay(settings, f"replay {[t.live for t in targets]} ({run})"):
        spark = session(settings)
        return _replayer(spark, settings, run, say, stream).replay(targets, until=until, dry_run=dry_run, confirm=confirm)


def rollback(settings: Settings, targets: Sequence[ReplayTarget], *, run: str, stream: StreamControl,
             say: Callable[[str], None] = log.info) -> list[str]:
    """``lake replay rollback``: restore each table to its version before its last switch."""
    with one_replay(settings, f"rollback {[t.live for t in targets]} ({run})"):
        spark = session(settings)
        return _replayer(spark, settings, run, say, stream, gate=False).rollback(targets)


def gaps(settings: Settings, targets: Sequence[ReplayTarget], sample: int) -> list[str]:
    """``lake replay gaps``: holes in the bronze offsets of ``targets``' archives (:mod:`.gaps`), one line each."""
    from spark_jobs.replay.gaps import offset_gaps

    spark = session(settings)
    lake = lake_for(spark, settings)
    lines: list[str] = []
    for bronze in sorted({t.bronze for t in targets}):
        if lake.exists(bronze):
            lines += [g.line() for g in offset_gaps(lake.read(bronze), bronze, sample)]
    return lines
