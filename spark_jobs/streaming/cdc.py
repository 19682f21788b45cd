"""The CDC query ``lake_cdc`` of the streaming app: Debezium topics -> bronze -> silver.

Subscribes to every ``shop.public.*`` topic. Per micro-batch (``foreachBatch``)
it collects the raw records to the driver as Arrow (one Spark job, no parse)
and, per table, in the driver:

1. appends the raw records to ``bronze.<topic>`` (key, value bytes, Kafka
   coordinates, ingest time) with delta-rs, idempotently: the Delta
   transaction ``<query id>:<table>`` carries the batch id, so a batch
   replayed after a crash is written once;
2. parses the Debezium envelopes, keeps the newest change per key, drops
   changes not newer than a recorded delete of that key, appends them to
   ``silver.<table>__changes`` and the batch's delete markers to
   ``silver.<table>__deleted`` (``spark_jobs.silver.cdc_arrow``; the rules are in
   ``spark_jobs.silver.cdc``). ``silver.<table>`` is a view: the newest row per
   key of ``silver.<table>__base`` and the pending changes (merge-on-read);
   a background thread (:class:`Compactor`) MERGEs pending changes into the
   base, position-guarded (so Connect re-sends are no-ops), once a table has
   ``LAKE_STREAM_COMPACT_ROWS`` of them or ``LAKE_STREAM_COMPACT_SECONDS`` passed;
3. appends every record it cannot parse or apply to ``quarantine.cdc`` (raw
   bytes, reason, Kafka coordinates), idempotently, and carries on;
4. widens the base and changes tables (and the view) when PostgreSQL gained a
   column (type from the PostgreSQL catalog: the records carry no schema; Spark
   ``ALTER TABLE``), then re-parses the batch, losing nothing;
5. writes a progress file for ``lake stream status`` / ``lake stream wait``;
6. every ``LAKE_STREAM_MAINTENANCE_MINUTES`` compacts (Spark OPTIMIZE) and
   vacuums the tables it owns, inside the batch loop, so no second driver
   writes them (the base and changes tables: the compaction thread vacuums them).

Back-pressure: ``maxOffsetsPerTrigger`` bounds every batch, so a backlog is
consumed in bounded steps (and the driver holds one batch of raw records).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from spark_jobs.contracts.shop import CDC_TABLES, TOPIC_PATTERN, CdcTable
from spark_jobs.driver_delta import DriverTable
from spark_jobs.hot.events import from_epoch_micros
from spark_jobs.io import ensure_database
from spark_jobs.settings import Settings
from spark_jobs.silver.cdc import POSITION_COLUMNS, quote_ident
from spark_jobs.silver.cdc_arrow import (
    Change,
    DeleteIndex,
    Parsed,
    Reject,
    append_changes,
    compact,
    parse_records,
    quarantine_table,
    row_schema,
)
from spark_jobs.streaming.common import (
    Maintenance,
    bronze_rows,
    bronze_schema,
    create_table,
    quarantine_schema,
    query_id,
    raw_records,
    read_json,
    start_kafka_query,
    status_path,
    write_json_atomic,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

QUERY = "lake_cdc"
QUARANTINE = "quarantine.cdc"
#: Delta table properties of ``silver.<t>__changes``: the change data feed gives ``lake bench cdc``
#: the commit time of each applied change (appends: the feed reads the added files). One file per
#: batch, dropped after the compaction: removed files are kept one day, not Delta's 7.
CHANGES_PROPS = {"delta.enableChangeDataFeed": "true", "delta.deletedFileRetentionDuration": "interval 1 days"}
#: Of ``silver.<t>__base``: each compaction rewrites most of it (delta-rs writes no deletion vectors),
#: so its removed files are kept one day for time travel and readers of older versions, not Delta's 7.
BASE_PROPS = {"delta.deletedFileRetentionDuration": "interval 1 days"}

__all__ = ["QUERY", "TOPIC_PATTERN", "CdcApp", "Compactor", "source_column_types", "spark_type_for"]


def spark_type_for(data_type: str, precision: int | None, scale: int | None) -> str:
    """A PostgreSQL column type (``information_schema.columns``) -> the Spark SQL type of its silver column.

    Matches the wire formats of the connector (``connectors/shop-postgres.json``) that the CDC parse
    reads: NUMERIC as exact text (a typed DECIMAL when the column has a precision), timestamptz as
    ISO-8601, date as days, bytea as base64, timestamp/time without zone as epoch micros.
    """
    t = data_type.lower()
    if t == "numeric":
        return f"DECIMAL({precision},{scale or 0})" if precision and precision <= 38 else "STRING"
    simple = {"smallint": "INT", "integer": "INT", "bigint": "BIGINT", "real": "FLOAT", "double precision": "DOUBLE",
              "boolean": "BOOLEAN", "timestamp with time zone": "TIMESTAMP", "date": "DATE", "bytea": "BINARY",
              "timestamp without time zone": "BIGINT", "time without time zone": "BIGINT"}
    return simple.get(t, "STRING")


def source_column_types(settings: Settings, schema: str, table: str, names: Sequence[str]) -> dict[str, str]:
    """Silver types of ``names``, columns of ``schema.table`` in the shop database (STRING if not found).

    The records carry no schema (``schemas.enable=false``: a Debezium record with its JSON schema was
    ~4 KB, the payload alone a few hundred bytes), so a column added in PostgreSQL is typed from the
    catalog, once, when it first shows up.
    """
    import psycopg2

    try:
        conn = psycopg2.connect(settings.pg_app_dsn(), connect_timeout=10,
                                application_name="lake-stream")
    except psycopg2.OperationalError as exc:
        raise RuntimeError(f"{QUERY}: cannot read the type of new column(s) {list(names)} of {schema}.{table} from "
                           f"PostgreSQL at {settings.pg_host}:{settings.pg_port} ({str(exc).strip()})") from exc
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT column_name, data_type, numeric_precision, numeric_scale "
                        "FROM information_schema.columns WHERE table_schema = %s AND table_name = %s "
                        "AND column_name = ANY(%s)", (schema, table, list(names)))
            found = {r[0]: spark_type_for(r[1], r[2], r[3]) for r in cur.fetchall()}
    finally:
        conn.close()
    return {n: found.get(n, "STRING") for n in names}


class CdcApp:
    """State and per-batch logic of the CDC query."""

    def __init__(self, spark: SparkSession, settings: Settings) -> None:
        self.spark = spark
        self.settings = settings
        # The base and changes tables are the compaction thread's to clean (Compactor).
        owned = [name for c in CDC_TABLES.values() for name in (c.deleted, c.bronze)]
        self.maintenance = Maintenance(spark, settings, QUERY, [*owned, QUARANTINE])
        self.timings: dict[str, float] = {}
        self._progress_lock = threading.Lock()
        self.progress: dict[str, Any] = {"tables": {}, "offsets": {}}
        self.progress = read_json(status_path(settings)) or self.progress
        self.tables: dict[str, DriverTable] = {}
        self.deletes: dict[str, DeleteIndex] = {}
        self.compactor = Compactor(settings, self.tables)

    # -- tables ---------------------------------------------------------------

    def ensure_tables(self) -> None:
        from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType, TimestampType

        from spark_jobs.silver.cdc import BATCH_COLUMN, SILVER_METADATA_COLUMNS

        for db in ("bronze", "silver", "quarantine"):
            ensure_database(self.spark, self.settings, db)
        meta_types = {"_op": StringType(), "_snapshot_rank": IntegerType(), "_commit_lsn": LongType(),
                      "_change_lsn": LongType(), "_source_ts": TimestampType(), "_extra": StringType()}
        for contract in CDC_TABLES.values():
            self._refuse_old_layout(contract)
            create_table(self.spark, self.settings, contract.bronze, bronze_schema(), ["ingest_date"])
            # Every silver column is nullable, the key too: delta-rs 1.6 MERGE with the change data feed checks
            # NOT NULL on an intermediate projection, where a source delete for a key silver lacks (insert
            # predicate false) is an all-NULL row, and fails the batch (same family as delta-io/delta-rs#4527).
            # The parse rejects a change without its key, so silver never gets a NULL key.
            silver_schema = StructType([*[StructField(f.name, f.dataType, True) for f in contract.schema.fields],
                                        *[StructField(c, meta_types[c]) for c in SILVER_METADATA_COLUMNS]])
            create_table(self.spark, self.settings, contract.base, silver_schema, props=BASE_PROPS)
            create_table(self.spark, self.settings, contract.changes,
                         StructType([*silver_schema.fields, StructField(BATCH_COLUMN, LongType())]),
                         [BATCH_COLUMN], props=CHANGES_PROPS)
            deleted_schema = StructType([*[contract.schema[k] for k in contract.keys],
                                         *[StructField(c, meta_types[c]) for c in
                                           ("_snapshot_rank", "_commit_lsn", "_change_lsn")]])
            # Delete markers: append-only (no MERGE), so no table properties needed.
            create_table(self.spark, self.settings, contract.deleted, deleted_schema)
        create_table(self.spark, self.settings, QUARANTINE, quarantine_schema())
        for name in [*[n for c in CDC_TABLES.values() for n in (c.bronze, c.changes, c.deleted)], QUARANTINE]:
            self.tables[name] = DriverTable(self.settings, name)
        for contract in CDC_TABLES.values():
            self._create_view(contract)
            index = DeleteIndex()
            index.add_table(self.tables[contract.deleted].read([*contract.keys, *POSITION_COLUMNS]), contract.keys)
            self.deletes[contract.table] = index
            self.compactor.track(contract, pending=self.tables[contract.changes].table.version() > 0)
        print(f"lake stream: {QUERY}: delete markers loaded: "
              + ", ".join(f"{t} {len(i)}" for t, i in sorted(self.deletes.items())), flush=True)

    def _refuse_old_layout(self, contract: CdcTable) -> None:
        """Stop, naming the fix, on a ``silver.<t>`` that is a table (the copy-on-write layout before merge-on-read)."""
        if not self.spark.catalog.tableExists(contract.silver):
            return
        kind = self.spark.catalog.getTable(contract.silver).tableType
        if kind.upper() != "VIEW":
            raise RuntimeError(
                f"{contract.silver} is a {kind} table: silver CDC tables are merge-on-read now ({contract.base} + "
                f"{contract.changes}, {contract.silver} their view) and there is no in-place upgrade before 1.0; "
                "`make clean`, then `make up` (PostgreSQL is snapshotted again by the connector). See README, "
                "'Upgrading'.")

    def _create_view(self, contract: CdcTable) -> None:
        """``CREATE OR REPLACE VIEW silver.<t>`` over the base and changes tables' current columns."""
        from spark_jobs.silver.cdc import current_view_sql
        from spark_jobs.silver.cdc_arrow import base_schema_of, toastable_of

        schema = base_schema_of(self.tables[contract.changes].arrow_schema)
        select = current_view_sql(contract.base, contract.changes, schema.names, contract.keys,
                                  toastable_of(schema, contract.keys))
        self.spark.sql(f"CREATE OR REPLACE VIEW {contract.silver} COMMENT 'one row per key: {contract.base} "
                       f"+ pending {contract.changes} (merge-on-read, spark_jobs.silver.cdc)' AS {select}")

    # -- the batch --------------------------------------------------------------

    def process(self, batch: DataFrame, batch_id: int) -> None:
        import pyarrow.compute as pc

        started = time.monotonic()
        app_id = query_id(self.spark, QUERY)
        t0 = time.monotonic()
        raw = raw_records(batch)
        self.timings["batch.read"] = time.monotonic() - t0
        ingest_time = datetime.now(UTC)
        per_partition = raw.group_by(["topic", "partition"]).aggregate([("offset", "max"), ("offset", "count")])
        topics = sorted(set(raw.column("topic").to_pylist()))
        rejects: list[Reject] = []
        # Tables are independent (one writer each). The parse runs here (Python, holds the GIL); the bronze
        # appends and the MERGEs run in threads (delta-rs writes Parquet and talks to S3 outside the GIL),
        # so one table's MERGE overlaps the next table's parse.
        with ThreadPoolExecutor(max_workers=4) as writes:
            futures: list[Future[Any]] = []
            for topic in topics:
                part = raw.filter(pc.equal(raw.column("topic"), topic))
                contract = CDC_TABLES.get(topic)
                if contract is None:
                    rejects += unknown_topic_rejects(part)
                    continue
                futures.append(writes.submit(self._bronze, contract, part, ingest_time, app_id, batch_id))
                t = time.monotonic()
                parsed = self._parse(contract, part)
                self.timings[f"{contract.table}.silver.parse"] = time.monotonic() - t
                rejects += parsed.rejects
                futures.append(writes.submit(self._apply, contract, parsed.changes, app_id, batch_id))
            for future in futures:
                future.result()
        t0 = time.monotonic()
        # Skipping the write when nothing was rejected keeps exactly-once: a re-run of
        # this batch sees the same records, so it makes the same decision.
        if rejects:
            self.tables[QUARANTINE].write_once(quarantine_table(rejects, datetime.now(UTC)), app_id, batch_id,
                                               "append")
        self.timings["quarantine"] = time.monotonic() - t0
        self._record_progress(per_partition.to_pylist(), batch_id, started)
        self.compactor.after_batch(app_id, batch_id)
        self.maintenance.run_if_due()

    def _bronze(self, contract: CdcTable, part: pa.Table, ingest_time: datetime, app_id: str, batch_id: int) -> None:
        t = time.monotonic()
        self.tables[contract.bronze].write_once(bronze_rows(part, ingest_time), app_id, batch_id, "append")
        self.timings[f"{contract.table}.bronze"] = time.monotonic() - t

    def _parse(self, contract: CdcTable, part: pa.Table) -> Parsed:
        """Parse one table's records; widen silver first when PostgreSQL gained columns (then parse again)."""
        from spark_jobs.silver.cdc import added_columns

        changes = self.tables[contract.changes]
        rows = row_schema(changes.arrow_schema)
        parsed = parse_records(part, rows, contract.keys)
        added = added_columns(rows.names, parsed.extra_columns)
        if added:
            t = time.monotonic()
            self._widen(contract, added)
            parsed = parse_records(part, row_schema(changes.arrow_schema), contract.keys)
            self.timings[f"{contract.table}.silver.widen"] = time.monotonic() - t
        return parsed

    def _apply(self, contract: CdcTable, changes: list[Change], app_id: str, batch_id: int) -> None:
        t = time.monotonic()
        with self.compactor.write_lock(contract.table):
            done = append_changes(self.tables[contract.changes], self.tables[contract.deleted],
                                  self.deletes[contract.table], changes, contract.keys, app_id, batch_id)
        self.timings[f"{contract.table}.silver.append"] = time.monotonic() - t
        self.compactor.appended(contract.table, done.changes)
        if not done.written:
            return
        with self._progress_lock:
            table_progress = self.progress["tables"].setdefault(contract.silver, {})
            table_progress["changes_applied"] = int(table_progress.get("changes_applied", 0)) + done.changes
            if done.newest_source_ts is not None:
                newest_ts = from_epoch_micros(done.newest_source_ts).isoformat()
                table_progress["newest_change"] = max(newest_ts, table_progress.get("newest_change", ""))

    def _widen(self, contract: CdcTable, added: list[str]) -> None:
        """``ALTER TABLE ... ADD COLUMNS`` on base and changes, each new column typed from the PostgreSQL catalog.

        Holds the table's compaction lock: the compaction thread writes the base.
        """
        types = source_column_types(self.settings, "public", contract.table, added)
        # A PostgreSQL quoted identifier may hold a backtick: Spark SQL escapes it by doubling.
        cols = ", ".join(f"{quote_ident(name)} {sql_type}" for name, sql_type in types.items())
        print(f"lake stream: {contract.silver} gains column(s) {cols} from PostgreSQL", flush=True)
        with self.compactor.lock(contract.table), self.compactor.write_lock(contract.table):
            for name in (contract.base, contract.changes):
                self.spark.sql(f"ALTER TABLE {name} ADD COLUMNS ({cols})")
            self.tables[contract.changes].reload_schema()
            self._create_view(contract)

    def _record_progress(self, per_partition: list[dict[str, Any]], batch_id: int, started: float) -> None:
        offsets = {f"{r['topic']}:{r['partition']}": int(r["offset_max"]) for r in per_partition}
        self.progress["offsets"].update(offsets)
        self.progress.update({
            "query": QUERY, "batch_id": batch_id, "committed_at": datetime.now(UTC).isoformat(),
            "batch_seconds": round(time.monotonic() - started, 3), "pid": os.getpid(),
            "batch_records": sum(int(r["offset_count"]) for r in per_partition),
            "step_seconds": {k: round(v, 3) for k, v in sorted(self.timings.items())},
        })
        self.timings = {}
        for table in self.progress["tables"].values():
            table["last_batch"] = batch_id
        write_json_atomic(status_path(self.settings), self.progress)


class Compactor:
    """MERGEs each silver table's pending changes into its base, in one background thread.

    The thread wakes every second and compacts the tables due (``rows_due``
    pending changes, or the oldest ``seconds_due`` old), whether or not batches
    arrive (Spark calls ``foreachBatch`` only for batches with data, so an idle
    stream still gets its last changes compacted). After a table's compaction it
    drops that table's changes of the compaction *before* it (the lag keeps what
    a query that read the base just before the newest compaction needs). The
    batch thread appends to the changes tables under :meth:`write_lock` and the
    drop takes it too, so the two never commit to a table at once. A failed
    compaction stops the query at its next batch (:meth:`after_batch`), naming
    the table; nothing is lost, the pending changes stay in the changes table
    (and the view) until a later compaction merges them.
    """

    def __init__(self, settings: Settings, tables: dict[str, DriverTable]) -> None:
        self.settings = settings
        self.tables = tables  # the batch thread's open tables (the changes tables among them)
        self.rows_due = settings.stream_compact_rows
        self.seconds_due = settings.stream_compact_seconds
        self._contracts: dict[str, CdcTable] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._write_locks: dict[str, threading.Lock] = {}
        self._rows: dict[str, int] = {}
        self._since: dict[str, float | None] = {}
        self._merged: dict[str, list[int]] = {}  # ``upto`` of this process's finished compactions, newest last
        self._purged: dict[str, int] = {}
        self._app_id: str | None = None
        self._last_batch = -1
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None

    def track(self, contract: CdcTable, pending: bool) -> None:
        """Manage ``contract``'s tables; ``pending``: its changes table may hold changes of an earlier run."""
        t = contract.table
        self._contracts[t] = contract
        self._locks[t] = threading.Lock()
        self._write_locks[t] = threading.Lock()
        self._rows[t] = 0
        self._since[t] = time.monotonic() - self.seconds_due if pending else None  # due at the first batch
        self._merged[t] = []

    def lock(self, table: str) -> threading.Lock:
        """Held while ``table``'s base is compacted; a schema change of its tables takes it too."""
        return self._locks[table]

    def write_lock(self, table: str) -> threading.Lock:
        """Held by whoever commits to ``table``'s changes table (the batch's append, the drop of merged changes)."""
        return self._write_locks[table]

    def appended(self, table: str, rows: int) -> None:
        if rows:
            self._rows[table] += rows
            if self._since[table] is None:
                self._since[table] = time.monotonic()

    def after_batch(self, app_id: str, batch_id: int) -> None:
        """Record the batch (its changes are committed); re-raise a failed compaction; start the thread once."""
        if self._error is not None:
            raise self._error
        self._app_id, self._last_batch = app_id, batch_id
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="lake-cdc-compact", daemon=True)
            self._thread.start()

    def _due(self) -> list[str]:
        now = time.monotonic()
        return [t for t, since in self._since.items()
                if self._rows[t] >= self.rows_due or (since is not None and now - since >= self.seconds_due)]

    def _run(self) -> None:
        # A daemon thread: a driver stopping mid-MERGE is a crash the MERGE survives (its commit is atomic,
        # the changes stay until a later compaction in the next run merges them).
        while self._error is None:
            time.sleep(1.0)
            upto, app_id = self._last_batch, self._app_id
            for t in self._due():
                self._rows[t], self._since[t] = 0, None
                try:
                    self._compact(t, str(app_id), upto)
                    self._purge(t)
                except Exception as exc:  # noqa: BLE001 -- surfaced by after_batch: the query fails, is restarted
                    self._error = exc
                    print(f"lake stream: {QUERY}: {exc}", flush=True)
                    return

    def _purge(self, t: str) -> None:
        from spark_jobs.silver.cdc import BATCH_COLUMN
        from spark_jobs.silver.cdc_arrow import quote

        merged = self._merged[t]
        if len(merged) < 2 or merged[-2] <= self._purged.get(t, -1):
            return
        upto = merged[-2]
        changes = self.tables[self._contracts[t].changes]
        started = time.monotonic()
        with self._write_locks[t]:
            changes.refresh()
            # A predicate on the partition column only: delta-rs removes whole files, it rewrites none.
            metrics = changes.table.delete(f"{quote(BATCH_COLUMN)} <= {upto}")
            removed = changes.vacuum()
        self._purged[t] = upto
        print(f"lake stream: {QUERY}: dropped {metrics.get('num_deleted_rows', '?')} merged change(s) of "
              f"{changes.name} up to batch {upto} in {time.monotonic() - started:.2f} s ({removed} old file(s) "
              "vacuumed)", flush=True)

    def _compact(self, t: str, app_id: str, upto: int) -> None:
        import pyarrow.compute as pc

        from spark_jobs.silver.cdc import BATCH_COLUMN

        contract = self._contracts[t]
        merged = self._merged[t]
        try:
            with self._locks[t]:
                started = time.monotonic()
                where = pc.field(BATCH_COLUMN) <= upto
                if merged:
                    where = where & (pc.field(BATCH_COLUMN) > merged[-1])
                pending = DriverTable(self.settings, contract.changes).read(where=where)
                base = DriverTable(self.settings, contract.base)
                metrics = compact(base, pending, contract.keys, app_id, upto) or {}
                removed = base.vacuum()
        except Exception as exc:
            raise RuntimeError(f"compaction of {contract.changes} (batches up to {upto}) into {contract.base} "
                               f"failed: {exc}") from exc
        merged.append(upto)
        summary = ", ".join(f"{metrics.get('num_target_rows_' + k, 0)} {k}" for k in ("inserted", "updated", "deleted"))
        print(f"lake stream: {QUERY}: compacted {pending.num_rows} pending change(s) of {contract.silver} up "
              f"to batch {upto} into {contract.base} in {time.monotonic() - started:.1f} s ({summary}; "
              f"{removed} old file(s) vacuumed)", flush=True)


def unknown_topic_rejects(part: pa.Table) -> list[Reject]:
    """Records of a topic the pattern matched but no contract names: quarantined, with the fix."""
    cols = part.to_pydict()
    return [Reject(k, v, t, p, o, ts, f"no CDC contract for topic {t}; add it to spark_jobs/contracts/shop.py")
            for k, v, t, p, o, ts in zip(cols["key"], cols["value"], cols["topic"], cols["partition"],
                                         cols["offset"], cols["kafka_timestamp"], strict=True)]


def start(spark: SparkSession, settings: Settings) -> StreamingQuery:
    """Create the CDC tables and start ``lake_cdc`` (Kafka ``shop.public.*`` -> foreachBatch)."""
    app = CdcApp(spark, settings)
    app.ensure_tables()
    # Bounded in records, not bytes: a CDC record with TOASTed text (before and after image) is 10-30 KB,
    # so a 100,000-record backlog batch reached ~0.5 GB and, read as a few whole-partition tasks, ran the
    # 2 GB driver out of heap (measured). Smaller tasks stream to the driver one after the other.
    return start_kafka_query(spark, settings, QUERY, ("subscribePattern", TOPIC_PATTERN),
                             settings.stream_max_offsets_per_trigger, settings.stream_trigger_seconds, app.process,
                             max_records_per_task=settings.stream_max_records_per_task)
