"""The Kappa replay (spark_jobs.replay) on local Delta tables: build from bronze, gate, diff, switch, rollback.

Small bronze tables are written to a temp dir the way the streaming app writes them; the "live" tables are what
the stream built (its own per-batch apply over the same records), then damaged the way a transform bug would.
The replay must rebuild exactly the rows the stream's transforms give, show the damage in its diff, switch in one
Delta commit, restore the previous version on rollback, and hold the stream stopped and its owner locks for the
switch.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from spark_jobs.contracts.tables import schema_of
from spark_jobs.hot.windows import SALES_PER_MINUTE, hot_schema
from spark_jobs.replay.build import events_rows, unique_checked
from spark_jobs.replay.run import Lake, ReplayConfig, Replayer, ReplayError, ReplayReport
from spark_jobs.replay.targets import EVENTS_SILVER, TARGETS, ReplayTarget, ReplayTargetError, resolve
from spark_jobs.silver.cdc import parse_frame
from spark_jobs.table_io.merge import apply_changes
from tests.unit.cdc_records import KEYS, ORDERS, TOPIC, Record, change, row
from tests.unit.event_records import enc, event

INGEST = datetime(2024, 3, 1, 12, 0, 5, tzinfo=UTC)
CDC_TARGET = ReplayTarget("silver.orders", "cdc", "bronze.shop__public__orders", TOPIC, tuple(KEYS),
                          companion="silver.orders__deleted")
EVENTS_TARGET = TARGETS[EVENTS_SILVER]
SALES_TARGET = TARGETS[SALES_PER_MINUTE.table]


def _silver_schema() -> Any:
    from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType, TimestampType

    return StructType([*ORDERS.fields, StructField("_op", StringType()), StructField("_snapshot_rank", IntegerType()),
                       StructField("_commit_lsn", LongType()), StructField("_change_lsn", LongType()),
                       StructField("_source_ts", TimestampType()), StructField("_extra", StringType())])


def _markers_schema() -> Any:
    from pyspark.sql.types import IntegerType, LongType, StructField, StructType

    return StructType([StructField("id", IntegerType()), StructField("_snapshot_rank", IntegerType()),
                       StructField("_commit_lsn", LongType()), StructField("_change_lsn", LongType())])


class FakeStream:
    """The supervised stream as the replay sees it; records the calls in order."""

    def __init__(self, running: bool = True) -> None:
        self.is_running = running
        self.calls: list[str] = []

    def running(self) -> bool:
        return self.is_running

    def stop(self) -> None:
        self.calls.append("stop")
        self.is_running = False

    def start(self) -> None:
        self.calls.append("start")
        self.is_running = True


class World:
    """A temp lake: tables by name under ``root``, bronze appends with consecutive offsets, the stream's apply."""

    def __init__(self, root: Path, spark: Any) -> None:
        self.root = root
        self.spark = spark
        self.lake = Lake(spark, self.location)
        self.offsets: dict[str, int] = {}
        self.stream = FakeStream()
        self.locks: list[list[str]] = []
        self.claimed: list[str] = []

    def location(self, name: str) -> str:
        return str(self.root / name.replace(".", "/"))

    def read(self, name: str, version: int | None = None) -> Any:
        return self.lake.read(name, version)

    def bronze(self, name: str, topic: str, records: list[Record], *, kafka_ts: datetime = INGEST,
               ingest: datetime = INGEST, partition: int = 0) -> list[dict[str, Any]]:
        """Append ``records`` to bronze table ``name`` as the stream archives them; returns the rows."""
        first = self.offsets.get(f"{name}:{partition}", 0)
        rows = [{"key": k, "value": v, "topic": topic, "partition": partition, "offset": first + i,
                 "kafka_timestamp": kafka_ts, "ingest_time": ingest, "ingest_date": ingest.date()}
                for i, (k, v) in enumerate(records)]
        self.offsets[f"{name}:{partition}"] = first + len(records)
        frame = self.spark.createDataFrame([tuple(r.values()) for r in rows], schema_of("bronze.events__clickstream"))
        frame.write.format("delta").mode("append").save(self.location(name))
        return rows

    def stream_cdc(self, rows: list[dict[str, Any]]) -> None:
        """The stream's batch over these bronze rows: parse, newest change per key, MERGE, delete markers."""
        from delta.tables import DeltaTable

        for name, schema in (("silver.orders", _silver_schema()), ("silver.orders__deleted", _markers_schema())):
            if not self.lake.exists(name):
                DeltaTable.create(self.spark).location(self.location(name)).addColumns(schema).execute()
        raw = self.spark.createDataFrame([tuple(r.values()) for r in rows], schema_of("bronze.events__clickstream")).drop(
            "ingest_time", "ingest_date")
        changes = parse_frame(raw, _silver_schema(), KEYS).where("_error IS NULL")
        markers = self.read("silver.orders__deleted")

        def append(frame: Any) -> None:
            frame.write.format("delta").mode("append").save(self.location("silver.orders__deleted"))

        apply_changes(self.spark, self.location("silver.orders"), changes, KEYS, markers,
                      append)

    @contextlib.contextmanager
    def claim(self, queries: list[str]) -> Iterator[None]:
        self.locks.append(queries)
        self.claimed = list(queries)
        try:
            yield
        finally:
            self.claimed = []

    def replayer(self, gate: Any = None, kafka: Any = None) -> Replayer:
        return Replayer(self.spark, self.lake, ReplayConfig(watermark_minutes=10, rollback_hours=24), self.stream,
                        self.claim, gate=gate, kafka=kafka, say=lambda _line: None, run="unit")


@pytest.fixture
def world(tmp_path: Path, spark: Any) -> World:
    return World(tmp_path, spark)


def _orders(world: World, version: int | None = None) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in world.read("silver.orders", version).select(
        "id", "status", "_op", "_commit_lsn").collect())


#: `extended` (tests/README.md): 50-90 s each on our 2 cores; the core suite keeps the switch + rollback and the
#: events/hot switch with both tails.
SLOW_VARIANT = pytest.mark.extended

HISTORY = [change("c", {"id": 1}, after=row(1, "new"), commit=100, lsn=110),
           change("c", {"id": 2}, after=row(2, "new"), commit=100, lsn=120),
           change("u", {"id": 1}, after=row(1, "paid"), commit=200, lsn=210),
           change("d", {"id": 2}, before={"id": 2}, commit=300, lsn=310),
           change("c", {"id": 3}, after=row(3, "new"), commit=400, lsn=410)]
RIGHT = [(1, "paid", "u", 200), (3, "new", "c", 400)]


def _damaged(world: World) -> None:
    """The stream built silver.orders from HISTORY; then a transform bug left a wrong status and a stray key."""
    world.stream_cdc(world.bronze("bronze.shop__public__orders", TOPIC, HISTORY))
    assert _orders(world) == RIGHT
    world.spark.sql(f"UPDATE delta.`{world.location('silver.orders')}` SET status = 'bug' WHERE id = 1")
    world.spark.createDataFrame([(9, "ghost", None, None, None, None, "c", 1, 900, 900, None, None)],
                                _silver_schema()).write.format("delta").mode("append").save(
        world.location("silver.orders"))


def test_resolve_names_patterns_and_errors() -> None:
    assert [t.live for t in resolve(["silver.orders"])] == ["silver.orders"]
    assert {t.live for t in resolve(["hot.*"])} == {"hot.sales_per_minute", "hot.active_users_5m", "hot.funnel_15m"}
    assert len(resolve([], everything=True)) == len(TARGETS)
    with pytest.raises(ReplayTargetError, match=r"gold\.fct_orders cannot be replayed"):
        resolve(["gold.fct_orders"])
    with pytest.raises(ReplayTargetError, match="not both"):
        resolve(["silver.orders"], everything=True)
    assert TARGETS["silver.orders"].shadow == "replay.silver__orders"
    assert TARGETS["silver.orders"].companion_shadow == "replay.silver__orders__deleted"


def test_output_rows_counts_the_newest_write_even_after_a_compaction(world: World) -> None:
    """The report's rebuilt-row count comes from the newest WRITE: an auto compaction's OPTIMIZE committed right
    after the append (silver.events' layout) made it 0 before."""
    rows = world.spark.createDataFrame([(i, f"e{i}") for i in range(7)], "id INT, name STRING")
    for part in range(2):  # two files, so OPTIMIZE has something to compact
        rows.where(f"id % 2 = {part}").write.format("delta").mode("append").save(world.location("replay.t"))
    world.spark.sql(f"OPTIMIZE delta.`{world.location('replay.t')}`")
    newest = world.spark.sql(f"DESCRIBE HISTORY delta.`{world.location('replay.t')}` LIMIT 1").first()
    assert newest is not None and newest["operation"] == "OPTIMIZE"
    assert world.lake.output_rows("replay.t") == 3


@SLOW_VARIANT
def test_dry_run_builds_the_shadow_and_diffs_without_switching(world: World) -> None:
    _damaged(world)
    live_version = world.lake.version("silver.orders")
    report = world.replayer().replay([CDC_TARGET], dry_run=True)

    assert report.status.startswith("built (dry run")
    assert sorted(tuple(r) for r in world.read("replay.silver__orders").select(
        "id", "status", "_op", "_commit_lsn").collect()) == RIGHT
    assert [tuple(r) for r in world.read("replay.silver__orders__deleted").select("id", "_commit_lsn").collect()] \
        == [(2, 300)]
    (rep,) = report.targets
    assert rep.point == {0: 4} and rep.counts == {"records": 5, "changes": 5, "rejects": 0, "deletes": 1}
    diff = rep.diff
    assert diff is not None
    assert (diff.live_rows, diff.shadow_rows, diff.only_live, diff.only_shadow, diff.changed) == (3, 2, 1, 0, 1)
    assert diff.only_live_keys == [{"id": 9}]
    assert diff.changed_rows[0]["key"] == {"id": 1} and diff.changed_rows[0]["columns"] == ["status"]
    assert (diff.changed_rows[0]["live"]["status"], diff.changed_rows[0]["shadow"]["status"]) == ("bug", "paid")
    assert world.lake.version("silver.orders") == live_version  # nothing switched
    assert world.stream.calls == [] and world.locks == []  # the stream was not touched

    # A second replay starts from an empty shadow: nothing of the first one's rows survives (a stale row at the same
    # source position would survive a MERGE, which only takes newer changes).
    world.spark.sql(f"UPDATE delta.`{world.location('replay.silver__orders')}` SET status = 'stale' WHERE id = 3")
    world.replayer().replay([CDC_TARGET], dry_run=True)
    assert sorted(tuple(r) for r in world.read("replay.silver__orders").select(
        "id", "status", "_op", "_commit_lsn").collect()) == RIGHT


def test_switch_is_one_commit_with_the_stream_stopped_and_locked_then_rollback_restores(world: World) -> None:
    _damaged(world)
    damaged = _orders(world)
    before = world.lake.version("silver.orders")
    assert before is not None
    seen_during_switch: list[tuple[bool, list[str]]] = []
    real_switch = world.lake.switch

    def switch(name: str, rows: Any, metadata: str) -> None:  # what holds while the live table is overwritten
        seen_during_switch.append((world.stream.is_running, list(world.claimed)))
        real_switch(name, rows, metadata)

    world.lake.switch = switch  # type: ignore[method-assign]
    report = world.replayer().replay([CDC_TARGET], confirm=lambda _r: True)

    assert report.status == "switched"
    assert _orders(world) == RIGHT
    assert seen_during_switch == [(False, ["lake_cdc"]), (False, ["lake_cdc"])]  # silver + its delete markers
    assert world.stream.calls == ["stop", "start"] and world.stream.is_running
    after = world.lake.version("silver.orders")
    assert after == before + 1  # one commit on the live table
    history = world.spark.sql(f"DESCRIBE HISTORY delta.`{world.location('silver.orders')}` LIMIT 1").first()
    assert history is not None
    assert history["operation"] == "WRITE" and history["userMetadata"].startswith(f"lake replay {report.replay_id}")
    replays = {r["table_name"]: r for r in world.read("ops.replays").collect()}
    assert set(replays) == {"silver.orders", "silver.orders__deleted"}
    assert (replays["silver.orders"]["action"], replays["silver.orders"]["version_before"],
            replays["silver.orders"]["version_after"]) == ("switch", before, after)
    assert json.loads(replays["silver.orders"]["offsets"]) == {"0": 4}

    lines = world.replayer().rollback([CDC_TARGET])
    assert _orders(world) == damaged == _orders(world, before)
    assert "silver.orders: restored version" in lines[0] and "0 record(s)" in lines[0]
    assert world.stream.calls == ["stop", "start", "stop", "start"]
    actions = sorted((r["table_name"], r["action"]) for r in world.read("ops.replays").collect())
    assert actions == [("silver.orders", "rollback"), ("silver.orders", "switch"),
                       ("silver.orders__deleted", "rollback"), ("silver.orders__deleted", "switch")]
    with pytest.raises(ReplayError, match="no switch to roll back"):
        world.replayer().rollback([CDC_TARGET])


@SLOW_VARIANT
def test_switch_applies_the_bronze_tail_archived_during_the_build(world: World) -> None:
    _damaged(world)
    later = [change("u", {"id": 3}, after=row(3, "shipped"), commit=500, lsn=510),
             change("c", {"id": 4}, after=row(4, "new"), commit=500, lsn=520)]

    def meanwhile(_report: ReplayReport) -> bool:  # the stream archives and applies more while the user reads
        world.stream_cdc(world.bronze("bronze.shop__public__orders", TOPIC, later))
        return True

    report = world.replayer().replay([CDC_TARGET], confirm=meanwhile)
    assert report.status == "switched"
    assert _orders(world) == [(1, "paid", "u", 200), (3, "shipped", "u", 500), (4, "new", "c", 500)]
    (rep,) = report.targets
    assert rep.point == {0: 6} and rep.counts["tail_changes"] == 2


@SLOW_VARIANT
def test_rollback_reapplies_what_the_stream_wrote_after_the_switch(world: World) -> None:
    _damaged(world)
    world.replayer().replay([CDC_TARGET], confirm=lambda _r: True)
    world.stream_cdc(world.bronze("bronze.shop__public__orders", TOPIC,
                                  [change("c", {"id": 5}, after=row(5, "new"), commit=600, lsn=610),
                                   change("d", {"id": 3}, before={"id": 3}, commit=700, lsn=710)]))
    lines = world.replayer().rollback([CDC_TARGET])
    # The damaged version is back, plus the changes the stream applied after the switch (id 5 created, id 3 deleted),
    # and the delete's marker is in the restored marker table (restored first, then the changes re-applied).
    assert _orders(world) == [(1, "bug", "u", 200), (5, "new", "c", 600), (9, "ghost", "c", 900)]
    assert sorted(tuple(r) for r in world.read("silver.orders__deleted").select("id", "_commit_lsn").collect()) == [
        (2, 300), (3, 700)]
    assert "2 record(s)" in lines[0]


@SLOW_VARIANT
def test_until_builds_up_to_that_kafka_time_and_the_switch_catches_up(world: World) -> None:
    world.bronze("bronze.shop__public__orders", TOPIC, HISTORY[:2], kafka_ts=INGEST)
    world.bronze("bronze.shop__public__orders", TOPIC, HISTORY[2:], kafka_ts=INGEST + timedelta(hours=1))
    world.stream_cdc([])  # the live tables exist (empty): the replay reads their schema
    dry = world.replayer().replay([CDC_TARGET], until=INGEST + timedelta(minutes=1), dry_run=True)
    assert dry.targets[0].point == {0: 1}
    assert sorted(tuple(r) for r in world.read("replay.silver__orders").select("id", "status").collect()) == \
        [(1, "new"), (2, "new")]
    world.replayer().replay([CDC_TARGET], until=INGEST + timedelta(minutes=1), confirm=lambda _r: True)
    assert _orders(world) == RIGHT


def test_block_rule_failure_stops_before_the_switch(world: World) -> None:
    _damaged(world)
    before = world.lake.version("silver.orders")

    def gate(target: ReplayTarget, shadow: Any, renames: dict[str, str]) -> tuple[bool, str]:
        assert renames == {"silver.orders": "replay.silver__orders"}
        return shadow.where("status = 'paid'").count() > 0, f"DQ {target.live}: BLOCKED (drill)"

    report = world.replayer(gate=gate).replay([CDC_TARGET], confirm=lambda _r: True)
    assert report.status == "blocked"
    assert report.targets[0].blocked and "BLOCKED" in report.targets[0].dq
    assert world.lake.version("silver.orders") == before and world.stream.calls == []


def test_declined_confirmation_switches_nothing(world: World) -> None:
    _damaged(world)
    before = world.lake.version("silver.orders")
    report = world.replayer().replay([CDC_TARGET], confirm=lambda _r: False)
    assert report.status.startswith("declined")
    assert world.lake.version("silver.orders") == before and world.stream.calls == []


def test_the_stream_is_restarted_when_the_switch_fails(world: World) -> None:
    _damaged(world)

    def broken(name: str, rows: Any, metadata: str) -> None:
        raise RuntimeError(f"S3 down while writing {name}")

    world.lake.switch = broken  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match=r"S3 down while writing silver\.orders"):
        world.replayer().replay([CDC_TARGET], confirm=lambda _r: True)
    assert world.stream.calls == ["stop", "start"]


def test_owner_lock_refuses_a_stream_started_during_the_switch(tmp_path: Path) -> None:
    """The production claim (spark_jobs.streaming.owner): while the replay holds it, a stream driver is refused."""
    from spark_jobs.replay.jobs import claim_queries
    from spark_jobs.settings import load_settings
    from spark_jobs.streaming.owner import QueryOwned, claim

    settings = load_settings({"LAKE_STATE_DIR": str(tmp_path)}, dotenv=False)
    with claim_queries(settings)(["lake_cdc"]):
        with pytest.raises(QueryOwned, match="query lake_cdc is already running"):
            claim(settings, ["lake_events", "lake_cdc"])
    claim(settings, ["lake_cdc"]).release()  # released after the switch


# -- events and hot ------------------------------------------------------------------------------------------

T0 = datetime(2026, 11, 22, 5, 0, 0, tzinfo=UTC)
A, B, C = ("00000000-0000-4000-8000-00000000000a", "00000000-0000-4000-8000-00000000000b",
           "00000000-0000-4000-8000-00000000000c")


def _ev(event_id: str, event_type: str = "page_view", minute: int = 0, **more: Any) -> Record:
    return None, enc(event(event_type, event_id=event_id, event_time=f"2026-11-22T04:{50 + minute:02d}:00Z", **more))


def _events_bronze(world: World) -> None:
    """A page view, its re-send 5 min later (inside the 10-min horizon: dropped) and 20 min later (outside: a new
    event), a purchase, a reject."""
    world.bronze("bronze.events__clickstream", "events.clickstream", [_ev(A), _ev(B, "purchase", 1)],
                 kafka_ts=T0, ingest=T0)
    world.bronze("bronze.events__clickstream", "events.clickstream", [_ev(A), (None, b"not json")],
                 kafka_ts=T0 + timedelta(minutes=5), ingest=T0 + timedelta(minutes=5))
    world.bronze("bronze.events__clickstream", "events.clickstream", [_ev(A)],
                 kafka_ts=T0 + timedelta(minutes=20), ingest=T0 + timedelta(minutes=20))


def test_events_dedup_keeps_first_copy_and_a_resend_after_the_horizon(world: World) -> None:
    from spark_jobs.silver.clickstream import check_events

    _events_bronze(world)
    checked = check_events(world.read("bronze.events__clickstream"), keep=["ingest_time"])
    kept = sorted((r["offset"], r["_event_id"], r["_reason"]) for r in unique_checked(checked, 600).collect())
    assert kept == [(0, A, None), (1, B, None), (3, None, "not_json"), (4, A, None)]
    # Continuing a built table: the copy at offset 4 is within the horizon of a kept copy 19 minutes in.
    prior = world.spark.createDataFrame([(A, T0 + timedelta(minutes=19))], "event_id string, _ingest_time timestamp")
    tail = checked.where("offset = 4")
    assert unique_checked(tail, 600, prior).count() == 0
    assert unique_checked(tail, 600).count() == 1


def test_events_dedup_over_many_ids_matches_the_rule(world: World) -> None:
    """Ids seen once (most of them) and ids re-sent 1-4 times at later ingest times: the kept copies are those of
    the rule (first copy, or ``horizon`` or more after the last kept one), computed here in Python."""
    from spark_jobs.silver.clickstream import check_events

    horizon = 600
    sent: list[tuple[str, int]] = []  # (event id, minute)
    for n in range(120):
        ident = f"00000000-0000-4000-8000-{n:012x}"
        minutes = [0] if n % 4 else [0, 3, 11, 12, 25][: 2 + n % 4]  # every 4th id is re-sent 1-4 times
        sent.extend((ident, m) for m in minutes)
    offsets: dict[tuple[str, int], int] = {}
    for minute in sorted({m for _, m in sent}):
        batch = [i for i, m in sent if m == minute]
        rows = world.bronze("bronze.events__clickstream", "events.clickstream", [_ev(i) for i in batch],
                            kafka_ts=T0 + timedelta(minutes=minute), ingest=T0 + timedelta(minutes=minute))
        offsets.update(((i, minute), r["offset"]) for i, r in zip(batch, rows, strict=True))
    expected = []
    for ident in sorted({i for i, _ in sent}):
        last = None
        for minute in sorted(m for i, m in sent if i == ident):
            if last is None or (minute - last) * 60 >= horizon:
                expected.append((ident, offsets[ident, minute]))
                last = minute
    checked = check_events(world.read("bronze.events__clickstream"), keep=["ingest_time"])
    kept = unique_checked(checked, horizon)
    assert sorted((r["_event_id"], r["offset"]) for r in kept.collect()) == expected
    assert len(expected) < len(sent)  # the re-sends within the horizon were dropped


def test_events_and_hot_are_rebuilt_with_the_stream_s_rules(world: World) -> None:
    from pyspark.sql.types import LongType, MapType, StringType, StructField, StructType

    _events_bronze(world)
    # The live tables as the stream created them (the replay takes their columns).
    rows = events_rows(world.read("bronze.events__clickstream").limit(0), 10)
    rows.write.format("delta").save(world.location(EVENTS_SILVER))
    world.spark.createDataFrame([], hot_schema(SALES_PER_MINUTE)).write.format("delta").save(
        world.location(SALES_PER_MINUTE.table))
    ledger = StructType([StructField("batch_id", LongType()),
                         StructField("offsets", MapType(StringType(), StringType()))])
    world.spark.createDataFrame([(7, {"0": "0-1"}), (8, {"0": "2-3"}), (9, {"0": "4-4"})], ledger).write.format(
        "delta").save(world.location("ops.stream_events_ledger"))
    world.spark.createDataFrame([(20, {"0": "0-3"})], ledger).write.format("delta").save(
        world.location("ops.stream_hot_ledger"))

    report = world.replayer().replay([EVENTS_TARGET, SALES_TARGET], dry_run=True)
    got = sorted((r["_offset"], r["event_id"], r["event_type"], r["_batch_id"], r["_late"])
                 for r in world.read("replay.silver__events").collect())
    assert got == [(0, A, "page_view", 7, False), (1, B, "purchase", 7, False), (4, A, "page_view", 9, True)]
    # Hot: the events the hot query had counted (its ledger: offsets 0-3), one purchase in minute 04:51.
    hot = [(r["window_start"], r["orders"], r["revenue"], r["late_events"], r["_last_batch"])
           for r in world.read("replay.hot__sales_per_minute").orderBy("window_start").collect()]
    assert hot == [(datetime(2026, 11, 22, 4, 50), 0, Decimal("0.00"), 0, 20),
                   (datetime(2026, 11, 22, 4, 51), 1, Decimal("39.98"), 0, 20)]
    assert {t.target.live: t.diff.only_shadow for t in report.targets if t.diff} == {
        EVENTS_SILVER: 3, SALES_PER_MINUTE.table: 2}


def test_offset_gaps_name_the_hole_and_the_keys_recorded_after_it(world: World) -> None:
    from spark_jobs.replay.gaps import offset_gaps

    rows = world.bronze("bronze.shop__public__orders", TOPIC, HISTORY)
    frame = world.read("bronze.shop__public__orders")
    assert offset_gaps(frame, "bronze.shop__public__orders") == []
    # Offsets 1-2 compacted away before the stream read them: key 2's create and key 1's first update.
    holed = frame.where("offset NOT IN (1, 2)")
    (gap,) = offset_gaps(holed, "bronze.shop__public__orders")
    assert (gap.partition, gap.first, gap.last) == (0, 1, 2)
    assert gap.key_count == 2 and gap.keys == sorted({rows[3]["key"].decode(), rows[4]["key"].decode()})
    assert "partition 0 offsets 1-2 (2 record(s)) were never archived" in gap.line()


def test_events_and_hot_switch_with_the_bronze_tail_and_the_hot_query_s_kafka_tail(world: World) -> None:
    from pyspark.sql.types import LongType, MapType, StringType, StructField, StructType

    _events_bronze(world)  # offsets 0-4
    events_rows(world.read("bronze.events__clickstream").limit(0), 10).write.format("delta").save(
        world.location(EVENTS_SILVER))
    world.spark.createDataFrame([], hot_schema(SALES_PER_MINUTE)).write.format("delta").save(
        world.location(SALES_PER_MINUTE.table))
    ledger = StructType([StructField("batch_id", LongType()),
                         StructField("offsets", MapType(StringType(), StringType()))])

    def ledgers(events: list[tuple[int, dict[str, str]]], hot: list[tuple[int, dict[str, str]]]) -> None:
        for name, rows in (("ops.stream_events_ledger", events), ("ops.stream_hot_ledger", hot)):
            world.spark.createDataFrame(rows, ledger).write.format("delta").mode("overwrite").save(
                world.location(name))

    ledgers([(7, {"0": "0-4"})], [(20, {"0": "0-4"})])
    late = T0 + timedelta(minutes=21)  # archived 21 min in (ingest time), received by Kafka 1 min in (on time)
    received = T0 + timedelta(minutes=1)
    d_record = _ev("00000000-0000-4000-8000-00000000000d", "purchase", 1)
    asked: list[tuple[str, dict[int, int], dict[int, int]]] = []

    def kafka(topic: str, after: dict[int, int], upto: dict[int, int]) -> Any:
        asked.append((topic, after, upto))
        return world.spark.createDataFrame([(d_record[0], d_record[1], topic, 0, 7, received)],
                                           "key binary, value binary, topic string, partition int, offset long, "
                                           "kafka_timestamp timestamp")

    def meanwhile(_report: ReplayReport) -> bool:
        # While the user reads the diff, the archive query lands offsets 5-6 (a re-send of A one minute after the
        # copy kept at offset 4: dropped; a new purchase C) and the hot query has counted offset 7 too.
        world.bronze("bronze.events__clickstream", "events.clickstream", [_ev(A), _ev(C, "purchase", 2)],
                     kafka_ts=received, ingest=late)
        ledgers([(7, {"0": "0-4"}), (8, {"0": "5-6"})], [(20, {"0": "0-4"}), (21, {"0": "5-7"})])
        return True

    report = world.replayer(kafka=kafka).replay([EVENTS_TARGET, SALES_TARGET], confirm=meanwhile)
    assert report.status == "switched"
    got = sorted((r["_offset"], r["event_id"], r["_batch_id"]) for r in world.read(EVENTS_SILVER).collect())
    assert got == [(0, A, 7), (1, B, 7), (4, A, 7), (6, C, 8)]
    assert asked == [("events.clickstream", {0: 6}, {0: 7})]  # only what bronze lacks
    hot = [(r["window_start"], r["orders"], r["revenue"], r["_last_batch"])
           for r in world.read(SALES_PER_MINUTE.table).orderBy("window_start").collect()]
    # 04:51: B and D (from Kafka); 04:52: C; A's page views count no order (the 04:50 window, the late copy).
    assert hot == [(datetime(2026, 11, 22, 4, 50), 0, Decimal("0.00"), 21),
                   (datetime(2026, 11, 22, 4, 51), 2, Decimal("79.96"), 21),
                   (datetime(2026, 11, 22, 4, 52), 1, Decimal("39.98"), 21)]
    switched = {r["table_name"]: json.loads(r["offsets"]) for r in world.read("ops.replays").collect()}
    assert switched == {EVENTS_SILVER: {"0": 6}, SALES_PER_MINUTE.table: {"0": 7}}


def test_the_gate_runs_the_live_table_s_suite_on_the_shadow(spark: Any, tmp_path: Path) -> None:
    """The production gate (spark_jobs.replay.jobs.dq_gate) with the real expectations/silver.products.yml: a
    duplicated key in the shadow fails its block rule, a clean shadow passes (warnings only)."""
    from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType, TimestampType

    from spark_jobs.contracts.shop import PRODUCTS
    from spark_jobs.replay.jobs import dq_gate
    from spark_jobs.settings import load_settings

    schema = StructType([*PRODUCTS.schema.fields, StructField("_op", StringType()),
                         StructField("_snapshot_rank", IntegerType()), StructField("_commit_lsn", LongType()),
                         StructField("_change_lsn", LongType()), StructField("_source_ts", TimestampType()),
                         StructField("_extra", StringType())])
    row = (10, "SKU-10", "Mug", "a mug", Decimal("18.90"), "{}", True, INGEST, "r", 0, 1, 1, INGEST, None)
    gate = dq_gate(spark, load_settings({"LAKE_STATE_DIR": str(tmp_path)}, dotenv=False), "unit")
    target = TARGETS["silver.products"]
    blocked, summary = gate(target, spark.createDataFrame([row], schema), {})
    assert not blocked and summary.startswith("DQ silver.products"), summary
    blocked, summary = gate(target, spark.createDataFrame([row, row], schema), {})
    assert blocked and "FAILED [block] product_id_unique" in summary, summary
