"""A replay from build to switch, and its rollback: the order of the steps and the coordination with the stream.

1. **Build** (the stream keeps running): per target, the bronze archive up to a build point (every record, or
   those with a Kafka time up to ``--until``; a point is offsets per partition) is run through the stream's
   transforms (:mod:`.build`) into the shadow ``replay.<db>__<table>``. Bronze is append-only, so the range is
   stable while the stream appends after it.
2. **Gate**: each shadow runs its table's suite (``expectations/<live table>.yml``; a ``{table:...}`` reference
   to another replayed table reads that table's shadow); a failed ``block`` expectation stops the replay.
3. **Diff** against the live table (:mod:`.diff`). ``--dry-run`` ends here, shadows kept for inspection.
4. **Confirm** (``--yes`` answers).
5. **Switch**, one writer at a time: the stream is stopped (supervisor) and the replay takes the streaming queries'
   owner locks (:mod:`spark_jobs.streaming.owner`), so a stream started meanwhile is refused; the tail of bronze
   past the build point (what the stream archived during the build) is applied to the shadow exactly as the
   stream applies a batch, the gate runs again on what changed, and each live table is overwritten from its
   shadow in **one Delta commit** (``DESCRIBE HISTORY`` shows it, with the replay id). ``ops.replays`` records
   the versions before and after. The locks are released and the stream restarted (if it was running): it
   resumes from its checkpoint, which is exactly where the switched tables end (they were rebuilt up to what it
   had committed), so nothing is applied twice or skipped.
6. **Rollback** (``lake replay rollback TABLE``): under the same stop and locks, ``RESTORE`` to the version before
   the switch, then re-apply what the stream wrote since the switch (from bronze for CDC, from the switched
   version's rows for ``silver.events``, added windows for the hot tables), one more commit.

Everything that touches services (the catalog, the supervisor, the locks, the suites, Kafka) is passed in, so the
unit tests run the same code on local Delta tables.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from spark_jobs.contracts.tables import schema_of
from spark_jobs.hot.windows import HOT_VIEWS
from spark_jobs.replay.build import (
    Offsets,
    add_windows,
    apply_cdc,
    events_rows,
    hot_rows,
    in_range,
    ledger_ranges,
    offsets_at,
    offsets_from_json,
    offsets_to_json,
)
from spark_jobs.replay.diff import TableDiff, diff_frames
from spark_jobs.replay.gaps import offset_gaps
from spark_jobs.replay.history import ROLLBACK, SWITCH, Entry, last_switch
from spark_jobs.replay.targets import CDC, EVENTS, EVENTS_SILVER, HOT, REPLAYS, ReplayTarget, needs_events, shadow_name

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

    from spark_jobs.settings import Settings

log = logging.getLogger(__name__)

EVENTS_LEDGER = "ops.stream_events_ledger"
HOT_LEDGER = "ops.stream_hot_ledger"
#: The streaming query that writes each kind of target (its owner lock is held during a switch).
QUERIES = {CDC: "lake_cdc", EVENTS: "lake_events", HOT: "lake_events"}  # the events query writes the hot tables too


class ReplayError(RuntimeError):
    """A replay or rollback cannot go on; the message names the table and what to do."""


class StreamControl(Protocol):
    """The supervised streaming app, as a replay needs it."""

    def running(self) -> bool: ...

    def stop(self) -> None: ...

    def start(self) -> None: ...


#: ``gate(target, shadow rows, renames) -> (blocked, summary)``: the table's suite on the shadow.
Gate = Callable[[ReplayTarget, "DataFrame", dict[str, str]], tuple[bool, str]]
#: ``claim(queries)``: a context holding the streaming queries' owner locks.
Claim = Callable[[list[str]], AbstractContextManager[Any]]
#: ``kafka(topic, after, upto) -> raw Kafka rows`` past ``after`` up to ``upto``: records not in bronze yet.
KafkaRange = Callable[[str, Offsets, Offsets], "DataFrame"]


class Lake:
    """The replay's table I/O by name: locations from ``locate`` (the lake's canonical ones, or a test's), every
    write through :mod:`spark_jobs.table_io`, catalog registration through ``register`` (None: paths only).

    Versions, schemas and the rows a write wrote are read from the Delta log by delta-rs in the driver (``settings``:
    the lake's S3 keys for ``s3a://`` locations; None for local paths): delta-spark loads a snapshot with Spark jobs
    for each (docs/benchmarks.md, "`lake bench replay`")."""

    def __init__(self, spark: SparkSession, locate: Callable[[str], str],
                 register: Callable[[str], None] | None = None, settings: Settings | None = None) -> None:
        self.spark = spark
        self.locate = locate
        self.register = register
        self.settings = settings

    def location(self, name: str) -> str:
        return self.locate(name)

    def version(self, name: str) -> int | None:
        from spark_jobs.table_io.driver import log_version

        return log_version(self.settings, self.locate(name))

    def exists(self, name: str) -> bool:
        return self.version(name) is not None

    def schema(self, name: str) -> StructType:
        """``name``'s schema from its Delta log (no Spark job)."""
        from spark_jobs.table_io.driver import DriverDeltaError, log_metadata

        try:
            return log_metadata(self.settings, self.locate(name))[1]
        except DriverDeltaError:
            self._require(name)  # no table there: say so as the replay does; another log error as it is
            raise

    def read(self, name: str, version: int | None = None) -> DataFrame:
        self._require(name)
        reader = self.spark.read.format("delta")
        if version is not None:
            reader = reader.option("versionAsOf", version)
        return reader.load(self.locate(name))

    def _require(self, name: str) -> None:
        if not self.exists(name):
            raise ReplayError(f"{name} does not exist at {self.locate(name)}: the streaming app creates it "
                              "(`lake stream start`); nothing to replay from or into")

    def create_empty(self, name: str, schema: StructType, like: str) -> None:
        """Make ``name`` an empty table with ``schema``, laid out as table ``like`` (its registry partitioning and
        properties); an earlier replay's shadow there is emptied (:func:`spark_jobs.table_io.create_empty_at`)."""
        from spark_jobs.table_io import create_empty_at

        create_empty_at(self.spark, self.locate(name), schema, like, exists=self.exists(name))
        self._registered(name)

    def replace(self, name: str, rows: DataFrame, like: str) -> int:
        """(Re)create shadow ``name`` laid out as table ``like`` and fill it with ``rows``; returns the rows written."""
        self.create_empty(name, rows.schema, like)
        return self.append(name, rows)

    def append(self, name: str, rows: DataFrame) -> int:
        from spark_jobs.table_io import append_to

        append_to(rows, self.locate(name))
        return self.output_rows(name)

    def output_rows(self, name: str) -> int:
        """Rows the newest write of ``name`` wrote (the report of silver.events once said 0 rebuilt events beside
        145,772 rows, reading the newest commit: an auto compaction's)."""
        from spark_jobs.table_io.driver import log_written_rows

        return log_written_rows(self.settings, self.locate(name))

    def switch(self, name: str, rows: DataFrame, metadata: str) -> None:
        from spark_jobs.table_io import overwrite_location

        overwrite_location(rows, self.locate(name), metadata)

    def restore(self, name: str, version: int) -> None:
        from spark_jobs.table_io import restore_location

        try:
            restore_location(self.spark, self.locate(name), version)
        except Exception as exc:
            raise ReplayError(f"RESTORE of {name} to version {version} failed ({str(exc).splitlines()[0]}): "
                              "its files may have been vacuumed (the table's delta.deletedFileRetentionDuration "
                              "bounds how long a rollback works; docs/operations.md, Replay (Kappa))") from exc

    def append_history(self, entries: Sequence[Entry]) -> None:
        from spark_jobs.table_io import append_to

        append_to(self.spark.createDataFrame([e.as_row() for e in entries], schema_of(REPLAYS)), self.locate(REPLAYS))
        self._registered(REPLAYS)

    def _registered(self, name: str) -> None:
        if self.register is not None:
            self.register(name)


@dataclass(frozen=True)
class ReplayConfig:
    """The settings a replay reads: the events de-duplication horizon, the rollback window, the diff sample."""

    watermark_minutes: int
    rollback_hours: float
    sample: int = 5


@dataclass
class TargetReport:
    """What happened to one target."""

    target: ReplayTarget
    point: Offsets = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    blocked: bool = False
    dq: str = ""
    diff: TableDiff | None = None
    version_before: int | None = None
    version_after: int | None = None
    #: Holes in the bronze offsets replayed (:mod:`.gaps`): changes Kafka dropped before the stream archived them.
    gaps: list[str] = field(default_factory=list)


@dataclass
class ReplayReport:
    """A replay's outcome: ``status`` is built (dry run), blocked, declined or switched."""

    replay_id: str
    status: str = "built"
    targets: list[TargetReport] = field(default_factory=list)

    def lines(self) -> list[str]:
        out = [f"replay {self.replay_id}: {self.status}"]
        for t in self.targets:
            out.append(f"{t.target.live} <- {t.target.bronze} up to offsets {offsets_to_json(t.point)} "
                       f"into {t.target.shadow}: " + ", ".join(f"{k}={v}" for k, v in sorted(t.counts.items())))
            out += [f"  WARNING: {line}" for line in t.gaps]
            if t.dq:
                out += ["  " + line for line in t.dq.splitlines()]
            if t.diff is not None:
                out += ["  " + line for line in t.diff.lines()]
            if t.version_after is not None:
                out.append(f"  switched: {t.target.live} version {t.version_before} -> {t.version_after} "
                           f"(`lake replay rollback {t.target.live}` restores {t.version_before})")
        return out


class Replayer:
    """Build, gate, diff, switch and roll back (module docstring), on ``lake`` and ``stream``."""

    def __init__(self, spark: SparkSession, lake: Lake, config: ReplayConfig, stream: StreamControl,
                 claim: Claim, gate: Gate | None = None, kafka: KafkaRange | None = None,
                 say: Callable[[str], None] = log.info, run: str | None = None,
                 clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self.spark = spark
        self.lake = lake
        self.config = config
        self.stream = stream
        self.claim = claim
        self.gate = gate
        self.kafka = kafka
        self.say = say
        self.run_name = run
        self.clock = clock
        self.events_point: Offsets = {}

    # -- replay ----------------------------------------------------------------------------------------------

    def replay(self, targets: Sequence[ReplayTarget], *, until: datetime | None = None, dry_run: bool = False,
               confirm: Callable[[ReplayReport], bool] = lambda _r: False) -> ReplayReport:
        """Steps 1-5 of the module docstring for ``targets``; the report says how far it went."""
        report = ReplayReport(replay_id=self.clock().strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:6])
        reports = {t.live: TargetReport(t) for t in targets}
        report.targets = list(reports.values())
        events_point = self._build_events(until) if needs_events(targets) else None
        self.events_point = events_point[0] if events_point else {}
        for i, t in enumerate(targets, 1):
            self.say(f"replay {i}/{len(targets)}: building {t.shadow} from {t.bronze}")
            if t.kind == CDC:
                self._build_cdc(t, reports[t.live], until)
            elif t.kind == EVENTS:
                assert events_point is not None
                reports[t.live].point, reports[t.live].counts = events_point
            else:
                self._build_hot(t, reports[t.live], self.events_point)
        if not self._gate_and_diff(report, targets):
            report.status = "blocked"
            return report
        if dry_run:
            report.status = "built (dry run: nothing switched; the shadows stay for inspection)"
            return report
        if not confirm(report):
            report.status = "declined: nothing switched (the shadows stay; run again with --yes to switch)"
            return report
        with self._stream_stopped(targets):
            changed = self._tail(targets, reports)
            if not self._gate_and_diff(report, targets, only=changed):
                report.status = "blocked after the tail: nothing switched"
                return report
            self._switch(report, targets)
        report.status = "switched"
        return report

    @contextlib.contextmanager
    def _stream_stopped(self, targets: Sequence[ReplayTarget]) -> Iterator[None]:
        """Stop the stream, hold its queries' owner locks for the body, restart it if it was running."""
        was_running = self.stream.running()
        if was_running:
            self.say("replay: stopping the streaming app (it finishes its batch) for the switch")
            self.stream.stop()
        try:
            queries = sorted({QUERIES[t.kind] for t in targets})
            with self.claim(queries):
                yield
        finally:
            if was_running:
                self.say("replay: restarting the streaming app; it resumes from its checkpoint")
                self.stream.start()

    def _build_cdc(self, t: ReplayTarget, rep: TargetReport, until: datetime | None) -> None:
        assert t.companion is not None and t.companion_shadow is not None
        bronze = self.lake.read(t.bronze)
        rep.point = offsets_at(bronze, until)
        rep.gaps = [g.line() for g in offset_gaps(bronze.where(in_range(None, rep.point)), t.bronze,
                                                   self.config.sample)]
        for line in rep.gaps:
            self.say(f"WARNING: {line}")
        schema = self.lake.schema(t.live)
        self.lake.create_empty(t.shadow, schema, t.live)
        self.lake.create_empty(t.companion_shadow, self.lake.schema(t.companion), t.companion)
        rep.counts = apply_cdc(self.spark, bronze.where(in_range(None, rep.point)), t.topic, schema, t.keys,
                               self.lake.location(t.shadow), self.lake.location(t.companion_shadow))

    def _build_events(self, until: datetime | None) -> tuple[Offsets, dict[str, int]]:
        """The replayed events (``replay.silver__events``): for ``silver.events`` and as the hot tables' input."""
        bronze = self.lake.read("bronze.events__clickstream")
        point = offsets_at(bronze, until)
        self.say(f"replay: events from bronze.events__clickstream up to offsets {offsets_to_json(point)}")
        rows = events_rows(bronze.where(in_range(None, point)), self.config.watermark_minutes, self._ranges())
        written = self.lake.replace(shadow_name(EVENTS_SILVER), self._like_live(rows, EVENTS_SILVER), EVENTS_SILVER)
        return point, {"events": written}

    def _ranges(self) -> DataFrame | None:
        return ledger_ranges(self.lake.read(EVENTS_LEDGER)) if self.lake.exists(EVENTS_LEDGER) else None

    def _like_live(self, rows: DataFrame, live: str) -> DataFrame:
        """``rows`` with the live table's columns, in its order (a missing one is an error naming it)."""
        columns = self.lake.schema(live).names
        missing = [c for c in columns if c not in rows.columns]
        if missing:
            raise ReplayError(f"the replayed rows of {live} lack its column(s) {missing}")
        return rows.select(*[f"`{c}`" for c in columns])

    def _hot_done(self) -> tuple[Offsets | None, int | None]:
        """The hot tables' committed offsets (last included) and last batch, from its ledger (None: no ledger)."""
        from pyspark.sql import functions as F

        if not self.lake.exists(HOT_LEDGER):
            return None, None
        ledger = self.lake.read(HOT_LEDGER)
        spans = ledger_ranges(ledger).groupBy("partition").agg(F.max("last").alias("last")).collect()
        last = ledger.agg(F.max("batch_id")).first()
        return {int(r[0]): int(r[1]) for r in spans}, (None if last is None or last[0] is None else int(last[0]))

    def _build_hot(self, t: ReplayTarget, rep: TargetReport, events_point: Offsets,
                   extra: DataFrame | None = None) -> None:
        """The hot table's shadow from the replayed events the hot tables had counted (their ledger's offsets, at most
        the events' build point), plus ``extra`` events (the Kafka tail) when given."""
        view = next(v for v in HOT_VIEWS if v.table == t.live)
        done, last_batch = self._hot_done()
        upto = dict(events_point) if done is None else {p: min(o, events_point.get(p, -1)) for p, o in done.items()}
        if extra is not None:  # the events past bronze are in ``extra``; the shadow holds the rest
            upto = dict(events_point)
        events = self.lake.read(shadow_name(EVENTS_SILVER)).where(in_range(None, upto, "_partition", "_offset"))
        if extra is not None:
            events = events.unionByName(extra.select(*events.columns))
        rows = hot_rows(events, view, self.clock(), last_batch)
        rep.point = upto
        rep.counts = {"windows": self.lake.replace(t.shadow, self._like_live(rows, t.live), t.live)}

    def _gate_and_diff(self, report: ReplayReport, targets: Sequence[ReplayTarget],
                       only: set[str] | None = None) -> bool:
        """The gate and the diff of every target (``only``: of those live tables); False if one is blocked."""
        renames = {t.live: t.shadow for t in targets}
        ok = True
        for rep in report.targets:
            t = rep.target
            if only is not None and t.live not in only:
                continue
            shadow = self.lake.read(t.shadow)
            if self.gate is not None:
                rep.blocked, rep.dq = self.gate(t, shadow, renames)
                ok = ok and not rep.blocked
            rep.diff = diff_frames(self.lake.read(t.live), shadow, self._diff_keys(t), live_name=t.live,
                                   shadow_name=t.shadow, skip=t.bookkeeping, sample=self.config.sample)
            for line in rep.diff.lines()[:1]:
                self.say(line)
        return ok

    @staticmethod
    def _diff_keys(t: ReplayTarget) -> tuple[str, ...]:
        # silver.events may hold one event_id twice (sent again after the horizon): its Kafka coordinates are unique.
        return ("_partition", "_offset") if t.kind == EVENTS else t.keys

    def _tail(self, targets: Sequence[ReplayTarget], reports: Mapping[str, TargetReport]) -> set[str]:
        """With the stream stopped: what bronze gained since the build point, applied to the shadows. Returns the
        live tables whose shadow changed (the gate and the diff run again on those)."""
        from pyspark.sql import functions as F

        changed: set[str] = set()
        archived: Offsets = {}
        added = 0
        if needs_events(targets):
            bronze = self.lake.read("bronze.events__clickstream")
            archived = offsets_at(bronze)
            tail = bronze.where(in_range(self.events_point, archived))
            first = tail.agg(F.min("ingest_time")).first()
            if first is not None and first[0] is not None:
                horizon = timedelta(minutes=self.config.watermark_minutes)
                prior = self.lake.read(shadow_name(EVENTS_SILVER)).where(
                    F.col("_ingest_time") >= F.lit(first[0] - horizon)).select("event_id", "_ingest_time")
                rows = events_rows(tail, self.config.watermark_minutes, self._ranges(), prior)
                added = self.lake.append(shadow_name(EVENTS_SILVER), self._like_live(rows, EVENTS_SILVER))
            self.say(f"replay: events tail up to offsets {offsets_to_json(archived)}: {added} event(s) added")
            if added:
                changed.add(EVENTS_SILVER)
        for t in targets:
            rep = reports[t.live]
            if t.kind == CDC:
                assert t.companion_shadow is not None
                bronze = self.lake.read(t.bronze)
                end = offsets_at(bronze)
                counts = apply_cdc(self.spark, bronze.where(in_range(rep.point, end)), t.topic,
                                   self.lake.schema(t.shadow), t.keys, self.lake.location(t.shadow),
                                   self.lake.location(t.companion_shadow))
                rep.point = end
                rep.counts.update({f"tail_{k}": v for k, v in counts.items()})
                self.say(f"replay: {t.live} tail up to offsets {offsets_to_json(end)}: {counts['changes']} change(s)")
                if counts["changes"]:
                    changed.add(t.live)
            elif t.kind == EVENTS:
                rep.point = archived
                rep.counts["tail_events"] = added
            else:  # rebuilt whole (small aggregates), to what the hot tables committed
                self._hot_at_switch(t, rep, archived)
                changed.add(t.live)
        return changed

    def _hot_at_switch(self, t: ReplayTarget, rep: TargetReport, archived: Offsets) -> None:
        """The hot shadow again, up to what the hot tables committed: a batch commits them beside its archive
        appends, so after a crash they may be ahead of bronze (those records come from Kafka, the tail beyond the
        archive) or behind it (the shadow stops at their offsets)."""
        from pyspark.sql import functions as F

        done, _last = self._hot_done()
        ahead = {p: o for p, o in (done or {}).items() if o > archived.get(p, -1)}
        extra = None
        if ahead:
            if self.kafka is None:
                raise ReplayError(f"{t.live}: the hot tables committed offsets {offsets_to_json(ahead)} of {t.topic} "
                                  f"that bronze does not hold yet (archived up to {offsets_to_json(archived)}) and "
                                  "this replay cannot read Kafka")
            raw = self.kafka(t.topic, {p: archived.get(p, -1) for p in ahead}, ahead)
            # Not archived, so no ingest time yet: its Kafka time stands in for the de-duplication horizon.
            records = raw.withColumn("ingest_time", F.col("kafka_timestamp"))
            first = records.agg(F.min("ingest_time")).first()
            since = (first[0] if first is not None and first[0] is not None else self.clock()) - timedelta(
                minutes=self.config.watermark_minutes)
            prior = self.lake.read(shadow_name(EVENTS_SILVER)).where(F.col("_ingest_time") >= F.lit(since)).select(
                "event_id", "_ingest_time")
            extra = self._like_live(events_rows(records, self.config.watermark_minutes, None, prior), EVENTS_SILVER)
            self.say(f"replay: {t.live}: the hot tables are ahead of bronze; offsets {offsets_to_json(ahead)} of "
                     f"{t.topic} read from Kafka")
        self._build_hot(t, rep, dict(done if done is not None else archived), extra)

    def _switch(self, report: ReplayReport, targets: Sequence[ReplayTarget]) -> None:
        """Each live table (and CDC delete markers) overwritten from its shadow in one commit; ops.replays rows."""
        now = self.clock()
        until = now + timedelta(hours=self.config.rollback_hours)
        for rep in report.targets:
            t = rep.target
            pairs = [(t.live, t.shadow)] + ([(t.companion, t.companion_shadow)] if t.companion and
                                             t.companion_shadow else [])
            for live, shadow in pairs:
                before = self.lake.version(live)
                rows = self._like_live(self.lake.read(shadow), live)
                self.lake.switch(live, rows, f"lake replay {report.replay_id}: {live} rebuilt from {t.bronze} up to "
                                             f"offsets {offsets_to_json(rep.point)} (shadow {shadow})")
                after = self.lake.version(live)
                # Recorded as soon as it is switched: a switch that fails later leaves this table rollback-able.
                self.lake.append_history([Entry(report.replay_id, live, SWITCH, shadow, before, after,
                                                offsets_to_json(rep.point), self.lake.output_rows(live), now, until,
                                                self.run_name, None)])
                if live == t.live:
                    rep.version_before, rep.version_after = before, after
                self.say(f"replay: switched {live}: version {before} -> {after}")

    # -- rollback ----------------------------------------------------------------------------------------------

    def rollback(self, targets: Sequence[ReplayTarget]) -> list[str]:
        """Step 6 of the module docstring for each of ``targets``; one line per table rolled back."""
        if not self.lake.exists(REPLAYS):
            raise ReplayError(f"no replay was ever switched ({REPLAYS} does not exist): nothing to roll back")
        now = self.clock()
        plans: list[tuple[ReplayTarget, list[Entry]]] = []
        for t in targets:
            names = [t.live] + ([t.companion] if t.companion else [])
            found = []
            for name in names:
                entry = last_switch(self.lake.read(REPLAYS), name)
                if entry is None:
                    raise ReplayError(f"{name}: no switch to roll back in {REPLAYS} (never replayed, or rolled "
                                      "back already)")
                if entry.rollback_until is not None and _utc(entry.rollback_until) < now:
                    raise ReplayError(f"{name}: the switch of replay {entry.replay_id} at {entry.at} can be rolled "
                                      f"back until {entry.rollback_until} (LAKE_REPLAY_ROLLBACK_HOURS); it is past")
                found.append(entry)
            plans.append((t, found))
        lines: list[str] = []
        with self._stream_stopped(targets):
            for t, found in sorted(plans, key=lambda p: [CDC, EVENTS, HOT].index(p[0].kind)):
                # Every table of the target first (CDC: silver and its delete markers), then what the stream wrote
                # since the switch, once: the re-applied MERGE appends markers to the restored marker table.
                was: dict[str, int | None] = {}
                for entry in found:
                    was[entry.table_name] = self.lake.version(entry.table_name)
                    assert entry.version_before is not None
                    self.say(f"replay rollback: RESTORE {entry.table_name} to version {entry.version_before}")
                    self.lake.restore(entry.table_name, entry.version_before)
                reapplied = self._since_switch(t, found[0], was[t.live])
                done: list[Entry] = []
                for entry in found:
                    after = self.lake.version(entry.table_name)
                    mine = reapplied if entry.table_name == t.live else 0
                    done.append(Entry(entry.replay_id, entry.table_name, ROLLBACK, entry.shadow,
                                      was[entry.table_name], after, entry.offsets, mine, self.clock(), None,
                                      self.run_name, f"restored version {entry.version_before}"))
                    lines.append(f"{entry.table_name}: restored version {entry.version_before} (was "
                                 f"{was[entry.table_name]}, now {after}); {mine} record(s) the stream wrote since the "
                                 "switch re-applied")
                # Recorded per target as it is done: a rollback that fails later leaves this one on record.
                self.lake.append_history(done)
        return lines

    def _since_switch(self, t: ReplayTarget, entry: Entry, switched_version: int | None) -> int:
        """After the RESTORE of ``t.live``: re-apply what the stream wrote after the switch (``entry.offsets``)."""
        from pyspark.sql import functions as F

        point = offsets_from_json(entry.offsets)
        if t.kind == CDC:
            assert t.companion is not None
            bronze = self.lake.read(t.bronze)
            counts = apply_cdc(self.spark, bronze.where(in_range(point, None)), t.topic,
                               self.lake.schema(t.live), t.keys, self.lake.location(t.live),
                               self.lake.location(t.companion))
            return counts["changes"]
        if t.kind == EVENTS:
            later = self.lake.read(t.live, switched_version).where(in_range(point, None, "_partition", "_offset"))
            if later.limit(1).count() == 0:
                return 0
            return self.lake.append(t.live, later)
        view = next(v for v in HOT_VIEWS if v.table == t.live)
        done, last_batch = self._hot_done()
        events = self.lake.read(EVENTS_SILVER).where(in_range(point, done, "_partition", "_offset"))
        count = events.agg(F.count(F.lit(1))).first()
        if count is None or not count[0]:
            return 0
        rows = add_windows(self.lake.read(t.live), events, view, self.clock(), last_batch).localCheckpoint()
        self.lake.switch(t.live, rows, f"lake replay rollback {entry.replay_id}: windows the stream added since the "
                                       "switch")
        return int(count[0])


def _utc(value: datetime) -> datetime:
    """A timestamp collected from Spark (naive, in this process's local time) -> aware UTC."""
    return value.astimezone(UTC)
