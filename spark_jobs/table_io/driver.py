"""Small Delta commits from the driver, without a Spark job (delta-rs).

Spark's Delta writer costs seconds per commit however small the data (delta-spark
rebuilds a table's state with a Spark job for every new version it reads). The
hot tables (a few hundred rows, rewritten every batch) and the events ledger (one
row per batch) are on the freshness-critical path, so the events query commits
them here: the ``deltalake`` (delta-rs) writer builds the Parquet file and the
commit JSON in the driver in tens of milliseconds (docs/benchmarks.md), and Spark
reads the result like any Delta version.

The tables are still created by Spark (catalog registration, schema,
properties) and still have one writer: the streaming app (DESIGN.md, single
writer per table on S3; ``AWS_S3_ALLOW_UNSAFE_RENAME`` states that delta-rs
relies on it). Only tables of reader version 1 whose writer features delta-rs
honours are written here; :func:`check_writable` refuses anything else.

Exactly-once uses the same convention as Spark's idempotent writes
(:class:`spark_jobs.table_io.append.OnceAppender`): the commit carries the Delta transaction
``<app_id>:<table>`` with the batch id as its version, and a write whose batch
id is not above the recorded version is skipped.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from spark_jobs.contracts.tables import APPEND, DRIVER_UPSERT
from spark_jobs.settings import Settings
from spark_jobs.table_io import require_write_mode, table_location

if TYPE_CHECKING:
    import pyarrow as pa
    from deltalake import CommitProperties, DeltaTable
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType


class DriverDeltaError(RuntimeError):
    """A table cannot be written from the driver (protocol, schema)."""


def storage_options(settings: Settings) -> dict[str, str]:
    """delta-rs object-store options for the lake's S3 endpoint and scoped keys (secrets: keep private)."""
    return {
        "AWS_ENDPOINT_URL": settings.s3_endpoint,
        "AWS_ACCESS_KEY_ID": settings.s3_access_key,
        "AWS_SECRET_ACCESS_KEY": settings.s3_secret_key,
        "AWS_REGION": settings.s3_region,
        "AWS_ALLOW_HTTP": str(settings.s3_endpoint.startswith("http://")).lower(),
        # No DynamoDB/conditional-put lock: safe only with one writer per table (DESIGN.md).
        "AWS_S3_ALLOW_UNSAFE_RENAME": "true",
    }


def table_uri(settings: Settings, name: str) -> str:
    """``s3://`` URI of table ``name`` (the same location Spark's ``s3a://`` path names)."""
    return delta_rs_uri(table_location(settings, name))


def delta_rs_uri(location: str) -> str:
    """delta-rs's URI of Spark ``location``: ``s3a://b/p`` -> ``s3://b/p``; a local path as is."""
    return "s3://" + location.removeprefix("s3a://") if location.startswith("s3a://") else location


def log_metadata(settings: Settings | None, location: str) -> tuple[dict[str, str], StructType]:
    """The properties and the Spark schema of the Delta table at Spark ``location``, read from its log by delta-rs
    in the driver (``s3a://`` with the lake's keys, or a local path): no Spark job. delta-spark loads a table's
    snapshot with Spark jobs to answer the same (``DeltaTable.detail()``, ``spark.read...schema``): 3-10 s per
    table on a cold driver, most of every start of the streaming app (docs/benchmarks.md, "Stream start")."""
    import json

    from pyspark.sql.types import StructType

    table = _open_log(settings, location)
    return dict(table.metadata().configuration), StructType.fromJson(json.loads(table.schema().to_json()))


def log_version(settings: Settings | None, location: str) -> int | None:
    """The latest version of the Delta table at Spark ``location`` from its log (delta-rs, no Spark job); None when
    no Delta table is there."""
    from deltalake.exceptions import TableNotFoundError

    try:
        return int(_open_log(settings, location).version())
    except DriverDeltaError as exc:
        if isinstance(exc.__cause__, TableNotFoundError):
            return None
        raise


def log_written_rows(settings: Settings | None, location: str) -> int:
    """Rows the newest write of the table at Spark ``location`` wrote (its ``numOutputRows``; 0 when it wrote none),
    from the log's commit infos (delta-rs, no Spark job). The newest WRITE, not the newest commit: Delta's auto
    compaction may commit an OPTIMIZE right after it."""
    for commit in _open_log(settings, location).history(20):
        if commit.get("operation") == "WRITE":
            return int((commit.get("operationMetrics") or {}).get("numOutputRows", 0))
    return 0


def _open_log(settings: Settings | None, location: str) -> DeltaTable:
    from deltalake import DeltaTable

    if location.startswith("s3a://") and settings is None:
        raise ValueError(f"{location}: the lake's settings are needed to read an s3a:// table")
    uri = delta_rs_uri(location)
    options = storage_options(settings) if settings is not None and uri != location else {}
    try:
        return DeltaTable(uri, storage_options=options)
    except Exception as exc:  # delta-rs raises TableNotFoundError, OSError, ... by backend
        raise DriverDeltaError(f"cannot read the Delta log at {location} ({exc})") from exc


class DriverTable:
    """One Delta table written from the driver: open once, then read, check and commit cheaply."""

    def __init__(self, settings: Settings | None, name: str, uri: str | None = None,
                 options: dict[str, str] | None = None) -> None:
        """Table ``name`` of the lake (``settings``), or at ``uri`` with object-store ``options`` (none: the local
        filesystem, as in tests; a Spark task gets the lake's uri and :func:`storage_options` from the driver)."""
        from deltalake import DeltaTable

        self.name = name
        if settings is not None:
            self.uri = table_uri(settings, name)
            self._options = storage_options(settings)
        elif uri is not None:
            self.uri, self._options = uri, dict(options or {})
        else:
            raise ValueError(f"{name}: give the lake's settings or a table uri")
        try:
            self.table: DeltaTable = DeltaTable(self.uri, storage_options=self._options)
        except Exception as exc:  # delta-rs raises TableNotFoundError, OSError, ... by backend
            raise DriverDeltaError(f"{name}: cannot open the Delta table at {self.uri} ({exc}); "
                                   "it is created by the streaming app's ensure_tables") from exc
        self._check_and_describe()

    def _check_and_describe(self) -> None:
        """Refuse the table if delta-rs may not write it (:func:`check_writable`) and take its Arrow schema."""
        check_writable(self.name, self.table.protocol())
        self.arrow_schema = _arrow_schema(self.table)

    def refresh(self) -> None:
        """Bring the table up to date from the log's new commits, its protocol and schema included (a table can
        gain deletion vectors past LAKE_CDC_TASK_MERGE_MAX_MB, and the CDC driver widens tables)."""
        self.table.update_incremental()
        self._check_and_describe()

    def read(self, columns: list[str] | None = None, where: Any = None) -> pa.Table:
        """The current version as an Arrow table; ``where``: a ``pyarrow.compute`` expression rows must match."""
        import pyarrow as pa

        self.refresh()
        if where is None:
            return pa.table(self.table.to_pyarrow_table(columns=columns))
        return pa.table(self.table.to_pyarrow_dataset().to_table(columns=columns, filter=where))

    def size_bytes(self) -> int:
        """Bytes of the current version's data files (the log's add actions; no listing, no data read)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        self.refresh()
        total = pc.sum(pa.table(self.table.get_add_actions(flatten=True))["size_bytes"]).as_py()
        return int(total or 0)

    def txn(self, app_id: str) -> str:
        """The Delta transaction id of ``app_id``'s commits to this table: ``<app_id>:<table>``."""
        return f"{app_id}:{self.name}"

    def committed(self, app_id: str, batch_id: int) -> bool:
        """Whether ``app_id`` committed batch ``batch_id`` (or a later one) to this table (its Delta transaction)."""
        self.refresh()
        done = self.table.transaction_version(self.txn(app_id))
        return done is not None and int(done) >= batch_id

    def write_once(self, rows: list[dict[str, Any]] | pa.Table, app_id: str, batch_id: int,
                   mode: Literal["append", "overwrite"], *, check_history: bool = False) -> bool:
        """Commit ``rows`` once for (``app_id``, ``batch_id``); False when that batch was already committed.

        The commit carries the transaction ``<app_id>:<table>`` = ``batch_id`` and Spark's ``userMetadata``
        marker ``<app_id>:<table>:<batch id>`` (:class:`spark_jobs.table_io.append.OnceAppender`'s);
        ``check_history``: also skip when one of the table's recent commits carries that marker (a batch a Spark
        append wrote, which sets the transaction only on a driver's first batch)."""
        import pyarrow as pa
        from deltalake import write_deltalake

        require_write_mode(self.name, APPEND)
        if self._batch_landed(app_id, batch_id, check_history):
            return False
        data = rows if isinstance(rows, pa.Table) else pa.Table.from_pylist(rows, schema=self.arrow_schema)
        write_deltalake(self.table, data.select(self.arrow_schema.names).cast(self.arrow_schema), mode=mode,
                        commit_properties=self._batch_commit(app_id, batch_id))
        return True

    def commit_files_once(self, adds: Sequence[str], app_id: str, batch_id: int, *,
                          check_history: bool = False) -> bool:
        """Append the data files Spark tasks wrote (``adds``: :func:`spark_jobs.table_io.task_files.write_files`'
        add actions) in one commit, once for (``app_id``, ``batch_id``), as :meth:`write_once` commits; False when
        that batch was already committed (its files are then never part of a version: ``VACUUM`` removes them)."""
        import json

        from deltalake.transaction import AddAction, RemoveAction

        require_write_mode(self.name, APPEND)
        if self._batch_landed(app_id, batch_id, check_history):
            return False
        actions: list[AddAction | RemoveAction] = [
            AddAction(a["path"], int(a["size"]), a["partitionValues"], int(a["modificationTime"]), True, a["stats"])
            for a in map(json.loads, adds)]
        partitions = list(self.table.metadata().partition_columns)
        self.table.create_write_transaction(actions, "append", self.table.schema(), partition_by=partitions or None,
                                            commit_properties=self._batch_commit(app_id, batch_id))
        return True

    def _batch_landed(self, app_id: str, batch_id: int, check_history: bool) -> bool:
        """Whether batch ``batch_id`` of ``app_id`` is in the table already: its transaction, or (``check_history``)
        its marker on a recent commit."""
        if self.committed(app_id, batch_id):
            return True
        marker = batch_marker(app_id, self.name, batch_id)
        return check_history and any(c.get("userMetadata") == marker for c in self.table.history(HISTORY))

    def _batch_commit(self, app_id: str, batch_id: int) -> CommitProperties:
        """A batch's commit properties: the transaction ``<app_id>:<table>`` = ``batch_id`` and the marker."""
        from deltalake import CommitProperties, Transaction

        return CommitProperties(app_transactions=[Transaction(self.txn(app_id), batch_id)],
                                custom_metadata={"userMetadata": batch_marker(app_id, self.name, batch_id)})

    def upsert_once(self, rows: list[dict[str, Any]], key: str, app_id: str, batch_id: int) -> bool:
        """MERGE ``rows`` by ``key`` (update the matched rows whole, insert the others) once for
        (``app_id``, ``batch_id``); False when that batch was already committed. Rewrites only the files
        holding a matched key."""
        import pyarrow as pa
        from deltalake import CommitProperties, Transaction

        require_write_mode(self.name, DRIVER_UPSERT)
        txn = self.txn(app_id)
        if self.committed(app_id, batch_id):
            return False
        source = pa.Table.from_pylist(rows, schema=self.arrow_schema)
        (self.table.merge(source, f"t.{key} = s.{key}", source_alias="s", target_alias="t",
                          commit_properties=CommitProperties(app_transactions=[Transaction(txn, batch_id)]))
         .when_matched_update_all().when_not_matched_insert_all().execute())
        return True

    def compact(self) -> None:
        """Rewrite the small files of the table into few (delta-rs OPTIMIZE compact)."""
        self.refresh()
        self.table.optimize.compact()

    def vacuum(self) -> int:
        """Delete files removed longer ago than the table's ``delta.deletedFileRetentionDuration``; returns how many."""
        self.refresh()
        return len(self.table.vacuum(dry_run=False))


#: Recent commits read back for a batch's marker (:meth:`DriverTable.write_once`, ``OnceAppender``): a batch's
#: append plus Delta's own follow-ups (a compaction, a MERGE of the same batch) are far fewer.
HISTORY = 25


def batch_marker(app_id: str, table: str, batch_id: int) -> str:
    """The ``userMetadata`` of ``app_id``'s commit of batch ``batch_id`` to ``table`` (Spark and delta-rs writes)."""
    return f"{app_id}:{table}:{batch_id}"


@dataclass(frozen=True)
class TaskAppend:
    """A table a Spark task appends to with delta-rs (:func:`append_split_in_task`): its name, object-store uri and the
    store's ``options`` (secrets: they travel in the task, over Spark's encrypted RPC; never printed)."""

    name: str
    uri: str
    options: Mapping[str, str] = field(repr=False)

    def open(self) -> DriverTable:
        """The table, opened where this runs (a Spark task). A Python worker serves many tasks: it keeps the
        tables it opened and brings them up to date from the log's new commits (:meth:`DriverTable.refresh`),
        checking their protocol and taking their schema again, instead of loading each table's log, its checkpoint
        included, every batch (an events task appending two tables: 0.50-1.07 s a batch before, 0.28-0.45 s
        after; docs/benchmarks.md). Raises :class:`DriverDeltaError` for a table delta-rs may no longer write."""
        key = (self.name, self.uri)
        table = _OPENED.get(key)
        if table is None:
            table = _OPENED[key] = DriverTable(None, self.name, self.uri, dict(self.options))
        else:  # kept from an earlier task: what the table became since counts
            table.refresh()
        return table


#: The tables this process's tasks opened (:meth:`TaskAppend.open`).
_OPENED: dict[tuple[str, str], DriverTable] = {}


def task_append(settings: Settings, name: str) -> TaskAppend | None:
    """:class:`TaskAppend` of lake table ``name``, or None when delta-rs cannot write it (its protocol)."""
    return writable_target(name, table_uri(settings, name), storage_options(settings))


def writable_target(name: str, uri: str, options: Mapping[str, str]) -> TaskAppend | None:
    """:class:`TaskAppend` of the table at ``uri``, or None when delta-rs cannot write it (:func:`check_writable`:
    deletion vectors, say): the caller then writes it with Spark."""
    target = TaskAppend(name, uri, options)
    try:
        target.open()
    except DriverDeltaError:
        return None
    return target


def append_split_in_task(frame: DataFrame, by: str, targets: Mapping[str, TaskAppend], app_id: str, batch_id: int,
                         *, check_history: bool) -> list[str]:
    """Append each value's rows of ``frame`` (column ``by``: ``targets``' keys, e.g. a Kafka topic) to its target,
    once per (``app_id``, ``batch_id``), in **one Spark task** that reads ``frame`` once, splits it in Arrow and
    commits every table with delta-rs (:meth:`DriverTable.write_once`); returns the names of the tables it wrote.
    Rows of a value ``targets`` lacks are not written (the caller writes them another way).

    A Spark append of a small batch costs a job, the commit and a table-state rebuild after it (seconds on this
    machine, whatever the batch's size); this costs one job for all the tables. One task for the CDC batch's four
    bronze tables, not one each: each of those scanned the whole cached batch and shipped its topic to Python,
    four jobs and four scans per batch (docs/benchmarks.md, "CDC: the bronze appends as one task")."""
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StringType, StructField, StructType

    out = StructType([StructField("written", StringType(), False)])
    arrow_out = to_arrow_schema(out)

    def run(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa
        import pyarrow.compute as pc

        received = [b for b in batches if b.num_rows]
        written: list[str] = []
        if received:
            rows = pa.Table.from_batches(received)
            for value in pc.unique(rows[by]).to_pylist():
                target = targets.get(value) if value is not None else None
                if target is None:
                    continue
                part = rows.filter(pc.equal(rows[by], value))
                if target.open().write_once(part, app_id, batch_id, mode="append", check_history=check_history):
                    written.append(target.name)
        yield pa.RecordBatch.from_pylist([{"written": name} for name in written], schema=arrow_out)

    return [row["written"] for row in frame.coalesce(1).mapInArrow(run, out).collect()]


#: Writer table features the driver writer (delta-rs) honours.
DRIVER_WRITER_FEATURES = frozenset({"appendOnly", "invariants", "changeDataFeed"})


def check_writable(name: str, protocol: Any) -> None:
    """Refuse tables whose protocol needs features the driver writer does not promise to honour."""
    reader, writer = int(protocol.min_reader_version), int(protocol.min_writer_version)
    # Writer 3 adds CHECK constraints, 4 the change data feed and generated columns: delta-rs enforces
    # the first and writes the feed's _change_data files for MERGE/UPDATE/DELETE. Writer 7 lists table
    # features instead (Delta 4 creates a change-data-feed table as (1, 7) with appendOnly, invariants
    # and changeDataFeed); only those are accepted. Reader features (deletion vectors, which delta-rs 1.x
    # cannot read) are refused.
    writer_features = set(protocol.writer_features or [])
    legacy = writer <= 4 and not writer_features
    listed = writer == 7 and writer_features <= DRIVER_WRITER_FEATURES
    if reader > 1 or protocol.reader_features or not (legacy or listed):
        features = sorted({*writer_features, *(protocol.reader_features or [])})
        hint = (" (deletion vectors: the silver CDC tables of Lakestream before the driver-side MERGE had them; "
                "see docs/operations.md, 'Upgrading')" if "deletionVectors" in features else "")
        raise DriverDeltaError(
            f"{name}: protocol (reader {reader}, writer {writer}, features {features}) is not written from the "
            f"driver{hint}; recreate the table without them (the streaming app creates (1, 2), or (1, 7) with "
            f"{sorted(DRIVER_WRITER_FEATURES)} at most)")


def _arrow_schema(table: DeltaTable) -> pa.Schema:
    import pyarrow as pa

    return pa.schema(table.schema().to_arrow())
