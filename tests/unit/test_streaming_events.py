"""The events query's streaming plan (events_stream): every record raw, checked records de-duplicated in the
state store across micro-batches, rejects passed through; and the per-batch counts built from it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from spark_jobs.streaming.archive import STATE_STORE_CONF, watermark_after_batch
from spark_jobs.streaming.clickstream_plan import batch_stats, events_stream, late_flag

KAFKA_SCHEMA = "key binary, value binary, topic string, partition int, offset long, timestamp timestamp"
T0 = datetime(2026, 11, 22, 5, 0, 0, tzinfo=UTC)


def _event(event_id: str, user: int, minute: int = 0) -> bytes:
    doc = {"event_id": event_id, "event_type": "page_view", "user_id": user, "session_id": "s-1",
           "event_time": (T0 + timedelta(minutes=minute)).strftime("%Y-%m-%dT%H:%M:%S.000Z"),
           "properties": {"page": "/"}, "schema_version": 1}
    return json.dumps(doc, separators=(",", ":")).encode()


def _ids(n: int) -> list[str]:
    return [f"0b8e7f0e-1c2d-4e5f-8a9b-{i:012d}" for i in range(n)]


class Run:
    """A streaming query over parquet files shaped like the Kafka source; each ``batch`` is one micro-batch."""

    def __init__(self, spark: Any, root: Path) -> None:
        self.spark, self.root = spark, root
        self.inbox = root / "in"
        self.inbox.mkdir()
        self.batches: list[list[dict[str, Any]]] = []
        self.stats: list[list[dict[str, Any]]] = []
        self.previous = {key: spark.conf.get(key, None) for key in STATE_STORE_CONF}
        for key, value in STATE_STORE_CONF.items():
            spark.conf.set(key, value)
        source = spark.readStream.schema(KAFKA_SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(self.inbox))

        def collect(frame: Any, _batch_id: int) -> None:
            self.batches.append([r.asDict() for r in frame.collect()])
            stats = [r.asDict() for r in batch_stats(frame, late_flag(10)).collect()]
            if stats:  # (not the no-data batches Spark runs to move the watermark on)
                self.stats.append(stats)

        self.query = (events_stream(source, 10).writeStream.foreachBatch(collect)
                      .option("checkpointLocation", str(root / "checkpoint")).start())
        self.n = 0

    def batch(self, records: list[tuple[int, int, bytes]]) -> list[dict[str, Any]]:
        rows = [(b"k", value, "events.clickstream", p, o, T0.replace(tzinfo=None)) for p, o, value in records]
        staged = self.root / f"staged{self.n}"
        self.spark.createDataFrame(rows, KAFKA_SCHEMA).coalesce(1).write.parquet(str(staged))
        for part in staged.glob("part-*.parquet"):  # the file source picks up whole files only
            part.rename(self.inbox / f"b{self.n}-{part.name}")
        self.n += 1
        before = len(self.batches)
        self.query.processAllAvailable()
        out = [row for rows in self.batches[before:] for row in rows]
        return out


@pytest.fixture
def state_store(spark: Any) -> Iterator[None]:
    """The events queries' state store settings (STATE_STORE_CONF) on the session for one test, restored after."""
    previous = {key: spark.conf.get(key, None) for key in STATE_STORE_CONF}
    for key, value in STATE_STORE_CONF.items():
        spark.conf.set(key, value)
    yield
    for key, old in previous.items():
        if old is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, old)


@pytest.fixture
def run(spark: Any, tmp_path: Path) -> Iterator[Run]:
    r = Run(spark, tmp_path)
    yield r
    r.query.stop()
    for key, old in r.previous.items():
        if old is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, old)


def _kinds(rows: list[dict[str, Any]], kind: str) -> list[tuple[int, int]]:
    return sorted((r["partition"], r["offset"]) for r in rows if r["_kind"] == kind)


def test_every_record_is_raw_once_and_resends_within_the_horizon_are_dropped_across_batches(run: Run) -> None:
    a, b, c = _ids(3)
    first = run.batch([(0, 0, _event(a, 1)), (0, 1, _event(b, 1)), (0, 2, _event(a, 1)), (1, 0, b"not json")])
    assert _kinds(first, "raw") == [(0, 0), (0, 1), (0, 2), (1, 0)]
    checked = [r for r in first if r["_kind"] == "checked"]
    # a twice in the batch: one copy survives; the reject passes through with its raw bytes and reason
    assert sorted(r["_event_id"] for r in checked if r["_reason"] is None) == [a, b]
    reject = next(r for r in checked if r["_reason"] is not None)
    assert (reject["_reason"], reject["value"], reject["offset"]) == ("not_json", b"not json", 0)
    assert all(r["value"] is None for r in checked if r["_reason"] is None)  # no raw bytes through the shuffle

    second = run.batch([(0, 3, _event(b, 1)), (0, 4, _event(c, 1)), (1, 1, b"not json")])
    assert _kinds(second, "raw") == [(0, 3), (0, 4), (1, 1)]
    # b was seen in the batch before (the state store): only c is new; the second reject is kept too
    assert sorted((r["_event_id"] or "", r["_reason"] or "") for r in second if r["_kind"] == "checked") == [
        ("", "not_json"), (c, "")]


def test_batch_stats_count_received_unique_rejects_and_offsets_per_partition(run: Run) -> None:
    a, b = _ids(2)
    run.batch([(0, 5, _event(a, 1)), (0, 6, _event(a, 1)), (0, 7, _event(b, 2, minute=3)), (2, 9, b"{}")])
    stats = {r["partition"]: r for r in run.stats[-1]}
    assert {p: (r["received"], r["first_offset"], r["last_offset"], r["appended"], r["quarantined"], r["late"])
            for p, r in stats.items()} == {0: (3, 5, 7, 2, 0, 0), 2: (1, 9, 9, 0, 1, 0)}
    assert stats[0]["newest_kafka_time"].replace(tzinfo=UTC) == T0  # the Kafka time of the batch's records


def test_late_flag_is_the_records_own_arrival_delay(spark: Any) -> None:
    """Late = reached Kafka more than the watermark after its event time: a property of the record alone, so the
    hot query, the archive query and a replay agree on every event whatever their batches."""
    kafka = (T0 + timedelta(minutes=10)).replace(tzinfo=None)
    rows = [(T0.replace(tzinfo=None), kafka),  # exactly 10 min: on time
            ((T0 - timedelta(microseconds=1)).replace(tzinfo=None), kafka),  # just over: late
            ((T0 + timedelta(minutes=11)).replace(tzinfo=None), kafka)]  # from the future: on time
    frame = spark.createDataFrame(rows, "_event_time timestamp, kafka_timestamp timestamp")
    flags = [r.late for r in frame.select(late_flag(10).alias("late")).collect()]
    assert flags == [False, True, False]


def test_first_seen_drops_resends_within_the_horizon_and_forgets_after_it(spark: Any, state_store: None,
                                                                           tmp_path: Path) -> None:
    """LakeDedup (events_plan.first_seen's operator) with a 15-second horizon: a re-send in a later batch within it
    is dropped, one after it passes again; copies inside one batch give one row. (The horizon is processing time:
    batches 1 and 2 must start within 15 s of each other, which even a loaded machine gives.)"""
    import time

    from pyspark.sql import DataFrame

    inbox = tmp_path / "in"
    inbox.mkdir()
    batches: list[list[str]] = []
    source = spark.readStream.schema("id string").option("maxFilesPerTrigger", 1).json(str(inbox))
    deduped = DataFrame(spark._jvm.LakeDedup.apply(source._jdf, "id", 15_000), spark)
    query = (deduped.writeStream.foreachBatch(lambda f, _b: batches.append(sorted(r.id for r in f.collect())))
             .option("checkpointLocation", str(tmp_path / "cp")).start())
    try:
        for n, (ids, pause) in enumerate([(["a", "a", "b"], 0.0), (["a", "c"], 0.0), (["a", "b"], 16.0)]):
            time.sleep(pause)
            (inbox / f"b{n}.json").write_text("".join(f'{{"id": "{i}"}}\n' for i in ids))
            query.processAllAvailable()
    finally:
        query.stop()
    assert [b for b in batches if b] == [["a", "b"], ["c"], ["a", "b"]], batches


def test_an_events_checkpoint_of_another_plan_is_refused_with_the_fix(spark: Any, tmp_path: Path) -> None:
    from spark_jobs.streaming.archive import require_plan
    from spark_jobs.streaming.clickstream_plan import PLAN_VERSION

    fresh = tmp_path / "fresh"
    require_plan(spark, str(fresh), "lake_events")
    assert (fresh / "lake-plan").read_text().strip() == PLAN_VERSION
    require_plan(spark, str(fresh), "lake_events")  # its own stamp: fine
    old = tmp_path / "old"
    (old / "offsets").mkdir(parents=True)
    (old / "offsets" / "0").write_text("v1\n{}\n")
    with pytest.raises(RuntimeError, match=r"older plan \(dropDuplicatesWithinWatermark\).*lake stack clean"):
        require_plan(spark, str(old), "lake_events")
    assert not (old / "lake-plan").exists()


def test_the_watermark_after_a_batch_is_its_newest_kafka_time_minus_the_horizon_and_never_moves_back() -> None:
    """One value for the events ledger, the hot ledger and the status: from what the batch received (a reject's
    Kafka time counts: the query read it), never below the watermark before the batch."""
    horizon = timedelta(minutes=10)
    t = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
    stats: list[dict[str, Any]] = [
        {"newest_kafka_time": t}, {"newest_kafka_time": t + timedelta(seconds=30)}, {"newest_kafka_time": None}]
    assert watermark_after_batch(stats, None, horizon) == t + timedelta(seconds=30) - horizon
    later = t + timedelta(minutes=5)
    assert watermark_after_batch(stats, later, horizon) == later  # an older batch does not move it back
    assert watermark_after_batch([{"newest_kafka_time": None}], later, horizon) == later
    assert watermark_after_batch([], None, horizon) is None


def test_a_batchs_counts_and_hot_deltas_come_from_one_job_over_the_cached_batch(spark: Any, state_store: None,
                                                                               tmp_path: Path) -> None:
    """batch_summary (the events query's first job): on the persisted batch, as the stream runs it, one Spark job
    gives the same per-partition counts as batch_stats and the same per-window rows as the hot deltas computed
    alone, and the de-duplication state still advances once per batch (a re-send in the next batch is dropped)."""
    from pyspark.sql import functions as F

    from spark_jobs.hot.windows import batch_deltas
    from spark_jobs.silver.clickstream import valid_events
    from spark_jobs.streaming.archive import batch_summary
    from spark_jobs.streaming.clickstream_plan import CHECKED
    from spark_jobs.streaming.engine import BatchJobs

    inbox = tmp_path / "in"
    inbox.mkdir()
    seen: list[dict[str, Any]] = []
    late = late_flag(10)

    def process(frame: Any, batch_id: int) -> None:
        frame = frame.persist()
        try:
            checked = frame.where(F.col("_kind") == CHECKED).withColumn("ingest_time", F.current_timestamp())
            valid = valid_events(checked, keep=[late.alias("_late")])
            jobs = BatchJobs(spark, "summary-test", batch_id, "hot")
            jobs.enter()
            try:
                stats, deltas = batch_summary(frame, late)
                summary_jobs = jobs.jobs()
            finally:
                jobs.leave()
            seen.append({"jobs": summary_jobs, "stats": stats, "deltas": deltas,
                         "alone": ([r.asDict() for r in batch_stats(frame, late).collect()],
                                   [r.asDict() for r in batch_deltas(valid.select(
                                       "event_type", "user_id", "event_time", "revenue", "_late",
                                       F.col("_kafka_timestamp").alias("kafka_timestamp"))).collect()]),
                         "valid": sorted(r.event_id for r in valid.collect())})
        finally:
            frame.unpersist()

    source = spark.readStream.schema(KAFKA_SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(inbox))
    query = (events_stream(source, 10).writeStream.foreachBatch(process)
             .option("checkpointLocation", str(tmp_path / "cp")).start())
    a, b, c = _ids(3)
    try:
        for n, records in enumerate([[(0, 0, _event(a, 1)), (0, 1, _event(b, 2, minute=3)), (1, 0, b"{}")],
                                     [(0, 2, _event(a, 1)), (1, 1, _event(c, 1, minute=2))]]):
            rows = [(b"k", value, "events.clickstream", p, o, T0.replace(tzinfo=None)) for p, o, value in records]
            staged = tmp_path / f"staged{n}"
            spark.createDataFrame(rows, KAFKA_SCHEMA).coalesce(1).write.parquet(str(staged))
            for part in staged.glob("part-*.parquet"):
                part.rename(inbox / f"b{n}-{part.name}")
            query.processAllAvailable()
    finally:
        query.stop()

    def key(row: dict[str, Any]) -> tuple[Any, ...]:
        return tuple(str(row[k]) for k in sorted(row))

    batches = [b for b in seen if b["stats"]]
    assert [b["valid"] for b in batches] == [[a, b], [c]]  # a again in batch 2: dropped, the state advanced once
    for batch in batches:
        assert batch["jobs"] == 1
        stats_alone, deltas_alone = batch["alone"]
        assert sorted(batch["stats"], key=key) == sorted(stats_alone, key=key)
        assert sorted(batch["deltas"], key=key) == sorted(deltas_alone, key=key)
        assert {d["table"] for d in batch["deltas"]} == {"hot.sales_per_minute", "hot.active_users_5m",
                                                         "hot.funnel_15m"}
