"""The merge-by-position write (``contracts.tables.MERGE_BY_POSITION``): a batch of parsed CDC changes -> a silver
table, the newest change per key guarded by its source position (the rules: :mod:`spark_jobs.silver.cdc`).

Two engines, one statement (:func:`merge_plan`): Spark's MERGE (:func:`apply_changes`, a table with deletion
vectors) and delta-rs in one Spark task (:func:`apply_changes_in_task`, a table up to
``LAKE_CDC_TASK_MERGE_MAX_MB``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.types import StructType

from spark_jobs.contracts.tables import MERGE_BY_POSITION
from spark_jobs.silver.cdc import UNAVAILABLE_VALUE, newest_changes, quote_ident, toastable_columns
from spark_jobs.silver.cdc_columns import POSITION_COLUMNS, SILVER_METADATA_COLUMNS
from spark_jobs.table_io import require_write_mode
from spark_jobs.table_io.driver import DriverTable, TaskAppend

if TYPE_CHECKING:
    import pyarrow as pa
    from delta.tables import DeltaTable
    from pyspark.sql import DataFrame, SparkSession


def quote_sql(name: str) -> str:
    """Double-quote an identifier for DataFusion SQL (the MERGE fragments delta-rs runs)."""
    return '"' + name.replace('"', '""') + '"'


def merge_condition(key_columns: Sequence[str], target: str = "t", source: str = "s",
                    quote: Callable[[str], str] = quote_ident) -> str:
    """``t.`k1` = s.`k1` AND ...``: the MERGE match condition on the primary key."""
    if not key_columns:
        raise ValueError("key_columns is empty: a MERGE needs the table's primary key columns")
    return " AND ".join(f"{target}.{quote(k)} = {source}.{quote(k)}" for k in key_columns)


def newer_condition(target: str = "t", source: str = "s", quote: Callable[[str], str] = quote_ident) -> str:
    """``s`` position > ``t`` position, lexicographic over ``POSITION_COLUMNS`` (all non-null in silver)."""
    terms: list[str] = []
    for i, col in enumerate(POSITION_COLUMNS):
        equal = [f"{source}.{quote(c)} = {target}.{quote(c)}" for c in POSITION_COLUMNS[:i]]
        terms.append(" AND ".join([*equal, f"{source}.{quote(col)} > {target}.{quote(col)}"]))
    return "(" + " OR ".join(f"({t})" for t in terms) + ")"


@dataclass(frozen=True)
class MergePlan:
    """SQL fragments for ``MERGE INTO silver t USING changes s`` (see the module docstring for the statement)."""

    condition: str
    newer: str
    delete_condition: str
    update_condition: str
    update_set: Mapping[str, str]
    insert_condition: str
    insert_values: Mapping[str, str]


def merge_plan(
    key_columns: Sequence[str],
    columns: Sequence[str],
    toastable: Sequence[str] = (),
    target: str = "t",
    source: str = "s",
    quote: Callable[[str], str] = quote_ident,
) -> MergePlan:
    """Build the MERGE fragments for a silver CDC table.

    ``columns`` are the target's columns (usually ``silver_columns``); they must
    include the key and ``POSITION_COLUMNS``; the source must also carry
    ``_op``. ``toastable`` columns keep the target value when the change holds
    ``UNAVAILABLE_VALUE``; every other column takes the source value. Updates
    and deletes apply only when the change is newer than the row; inserts
    never come from deletes. An insert keeps a placeholder as is (there is no
    old value to keep), where data-quality checks can see it.
    """
    cols = list(columns)
    missing = [c for c in [*key_columns, *POSITION_COLUMNS] if c not in cols]
    if missing:
        raise ValueError(f"merge_plan: columns {missing} are missing from the target columns {cols}")
    stray = [c for c in toastable if c not in cols or c in key_columns]
    if stray:
        raise ValueError(f"merge_plan: TOAST-able columns {stray} are not non-key target columns")
    newer = newer_condition(target, source, quote)
    is_delete = f"{source}.{quote('_op')} = 'd'"
    update_set: dict[str, str] = {}
    for c in cols:
        if c in key_columns:
            continue
        s_c, t_c = f"{source}.{quote(c)}", f"{target}.{quote(c)}"
        update_set[c] = f"CASE WHEN {s_c} = '{UNAVAILABLE_VALUE}' THEN {t_c} ELSE {s_c} END" if c in toastable else s_c
    return MergePlan(
        condition=merge_condition(key_columns, target, source, quote),
        newer=newer,
        delete_condition=f"{is_delete} AND {newer}",
        update_condition=f"{source}.{quote('_op')} <> 'd' AND {newer}",
        update_set=update_set,
        insert_condition=f"{source}.{quote('_op')} <> 'd'",
        insert_values={c: f"{source}.{quote(c)}" for c in cols},
    )


def apply_changes(spark: SparkSession, location: str, changes: DataFrame, keys: Sequence[str],
                  markers: DataFrame | None, append_markers: Callable[[DataFrame], None] | None, *,
                  checkpoint: bool = False) -> None:
    """One table's batch of parsed ``changes`` -> the silver table at ``location``, all in Spark.

    The newest change per key (:func:`newest_changes`, against the delete ``markers``) is MERGEd
    (:func:`merge_plan`'s statement, position-guarded, so a replayed batch changes nothing); then its
    deletes (key + position) go to ``append_markers`` (None: the batch has none). Markers after the MERGE:
    a crash in between leaves the row deleted and the replay appends them; the other order would let a
    replay's recorded marker hide the batch's own delete from the MERGE.

    ``checkpoint``: the MERGE source is computed once, by one job, into a local checkpoint (its lineage cut), which
    the MERGE (with ``spark.databricks.delta.merge.materializeSource=none``, set by the streaming app) and the
    markers read as they are; without it Delta materialises the source itself and the markers recompute it.
    """
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    target = DeltaTable.forPath(spark, location)
    columns = target.toDF().schema
    rows = StructType([f for f in columns.fields if f.name not in SILVER_METADATA_COLUMNS])
    toastable = toastable_columns(rows, keys)
    # Not cached (persist) by us: with merge.materializeSource=none a cached subplan fails the MERGE whenever
    # another table's thread caches meanwhile (DELTA_MERGE_SOURCE_CACHED_DURING_EXECUTION, seen on the stack);
    # a local checkpoint has no cached subplan (its lineage is cut). The markers' snapshot is pinned when the
    # frame is built.
    source = newest_changes(changes, columns.names, keys, toastable, markers)
    if checkpoint:
        source = source.localCheckpoint(eager=True)
    merge(target, source, keys, toastable)
    if append_markers is not None:
        append_markers(source.where(F.col("_op") == "d").select(*[F.col(quote_ident(c)) for c in
                                                                   [*keys, *POSITION_COLUMNS]]))


def merge(target: DeltaTable, source: DataFrame, keys: Sequence[str], toastable: Sequence[str]) -> None:
    """``MERGE INTO target`` the newest changes (:func:`merge_plan`'s statement), in Spark."""
    plan = merge_plan(keys, source.columns, toastable)
    (target.alias("t").merge(source.alias("s"), plan.condition)
     .whenMatchedDelete(plan.delete_condition)
     # Target column names are parsed as identifiers: quoted, so a name with a backtick or dot works.
     .whenMatchedUpdate(plan.update_condition, {quote_ident(c): v for c, v in plan.update_set.items()})
     .whenNotMatchedInsert(plan.insert_condition, {quote_ident(c): v for c, v in plan.insert_values.items()})
     .execute())


# -- the MERGE in a Spark task (delta-rs) ------------------------------------------------------------------------


@dataclass(frozen=True)
class TaskTarget:
    """One table's writes for :func:`apply_changes_in_task`: ``silver.<t>`` and its delete markers (each where a
    Spark task opens it with delta-rs), and ``app_id``, the prefix of each commit's Delta transaction
    (``<app_id>:<table>`` = the batch id)."""

    silver: TaskAppend
    markers: TaskAppend
    app_id: str = ""


#: What :func:`apply_changes_in_task` reports per table and batch (one row, from its one task).
APPLIED_FIELDS = (("changes", "long"), ("superseded", "long"), ("updated", "long"), ("inserted", "long"),
                  ("deleted", "long"), ("markers", "long"), ("commits", "long"), ("table_bytes", "long"),
                  ("seconds", "double"))


def applied_schema() -> StructType:
    from pyspark.sql.types import DoubleType, LongType, StructField

    return StructType([StructField(name, DoubleType() if kind == "double" else LongType(), False)
                       for name, kind in APPLIED_FIELDS])


def apply_changes_in_task(changes: DataFrame, columns: StructType, keys: Sequence[str], target: TaskTarget,
                          batch_id: int) -> dict[str, Any]:
    """One table's batch of parsed ``changes`` -> ``silver.<t>`` in **one Spark job**: the newest change per key
    (:func:`newest_changes`, a window in Spark tasks), then one task that drops the changes a delete marker
    supersedes, MERGEs the rest (:func:`merge_plan`'s statement) with delta-rs and appends the batch's deletes to
    the markers (:func:`merge_batches`). Returns the task's counts (:data:`APPLIED_FIELDS`).

    Why delta-rs in a task and not Spark's MERGE: on this stack's 2 cores a Spark MERGE costs 11-30 s per table
    and batch whatever its size (10-20 dependent Spark jobs: table-state rebuilds, the touched-files scan, the
    write), measured with and without adaptive execution; delta-rs MERGEs 5,000 changes into a 13,000-row table in
    0.1-0.35 s (docs/benchmarks.md, "CDC design G"). The per-record work stays in Spark tasks; the commit is the
    task's, guarded by the position (a re-run changes nothing) and by the batch's Delta transaction."""
    from pyspark.sql.pandas.types import to_arrow_schema

    rows = StructType([f for f in columns.fields if f.name not in SILVER_METADATA_COLUMNS])
    toastable = toastable_columns(rows, keys)
    # One partition before the window: Spark's single partition satisfies the window's clustering by key, so the
    # rule runs in the MERGE task itself, with no shuffle (a shuffle stage per table and batch before:
    # docs/benchmarks.md, "CDC: the bronze appends as one task").
    source = newest_changes(changes.coalesce(1), columns.names, keys, toastable, None)
    out = applied_schema()
    arrow_out, key_list = to_arrow_schema(out), list(keys)

    def run(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        yield merge_batches(batches, target, key_list, toastable, batch_id, arrow_out)

    found = source.mapInArrow(run, out).collect()  # one partition already: one task
    if len(found) != 1:
        raise RuntimeError(f"{target.silver.name}: the MERGE task of batch {batch_id} reported {len(found)} rows, not 1")
    return found[0].asDict()


def merge_batches(batches: Iterable[pa.RecordBatch], target: TaskTarget, keys: Sequence[str],
                  toastable: Sequence[str], batch_id: int, out: pa.Schema) -> pa.RecordBatch:
    """In a Spark task: the newest changes of one table (``batches``) -> silver and its markers (delta-rs); one
    row of counts. Markers after the MERGE (as :func:`apply_changes`): a crash in between re-runs the batch, whose
    MERGE then changes nothing and whose markers are appended then."""
    import time

    import pyarrow as pa
    import pyarrow.compute as pc

    started = time.monotonic()
    counts = dict.fromkeys((name for name, _ in APPLIED_FIELDS), 0)
    received = [b for b in batches if b.num_rows]
    if received:
        source = pa.Table.from_batches(received)
        silver, markers = target.silver.open(), target.markers.open()
        kept = drop_superseded(source, markers, keys)
        counts["changes"], counts["superseded"] = source.num_rows, source.num_rows - kept.num_rows
        if kept.num_rows:
            metrics = merge_once(silver, kept, keys, toastable, target.app_id, batch_id)
            if metrics is not None:
                counts["commits"] += int(metrics.get("commits") or 0)
                counts["updated"] = int(metrics.get("num_target_rows_updated") or 0)
                counts["inserted"] = int(metrics.get("num_target_rows_inserted") or 0)
                counts["deleted"] = int(metrics.get("num_target_rows_deleted") or 0)
            deletes = kept.filter(pc.equal(kept["_op"], "d")).select([*keys, *POSITION_COLUMNS])
            if deletes.num_rows and markers.write_once(deletes, target.app_id, batch_id, mode="append"):
                counts["commits"] += 1
                counts["markers"] = deletes.num_rows
        counts["table_bytes"] = silver.size_bytes()
    counts["seconds"] = round(time.monotonic() - started, 3)  # type: ignore[assignment]
    return pa.RecordBatch.from_pylist([counts], schema=out)


def drop_superseded(source: pa.Table, markers: DriverTable, keys: Sequence[str]) -> pa.Table:
    """``source`` (newest changes) without those whose key has a delete marker at a position not older (a re-sent
    change after a delete must not bring the key back): :func:`newest_changes`' marker rule, in Arrow."""
    import pyarrow as pa
    import pyarrow.compute as pc

    found = markers.read(columns=[*keys, *POSITION_COLUMNS],
                         where=pc.field(keys[0]).isin(pc.unique(source[keys[0]])))
    if not found.num_rows:
        return source
    ids = source.select(list(keys) + list(POSITION_COLUMNS)).append_column(
        "_i", pa.array(range(source.num_rows), pa.int64()))
    marked = found.rename_columns([*keys, *[f"_m{c}" for c in POSITION_COLUMNS]])
    joined = ids.join(marked, keys=list(keys), join_type="inner")
    not_older = None  # the marker's position >= the change's, lexicographic over POSITION_COLUMNS
    for col in reversed(POSITION_COLUMNS):
        mine, theirs = joined[col], joined[f"_m{col}"]
        step = pc.greater_equal(theirs, mine) if not_older is None else pc.or_(
            pc.greater(theirs, mine), pc.and_(pc.equal(theirs, mine), not_older))
        not_older = step
    dropped = joined.filter(not_older)["_i"]
    if not len(dropped):
        return source
    return source.filter(pc.invert(pc.is_in(ids["_i"], value_set=pc.unique(dropped))))


def merge_once(table: DriverTable, source: pa.Table, keys: Sequence[str], toastable: Sequence[str], app_id: str,
               batch_id: int) -> dict[str, Any] | None:
    """delta-rs ``MERGE INTO`` ``table`` the newest changes ``source`` (:func:`merge_plan`'s statement, DataFusion
    quoting), the batch's last commit carrying the transaction ``<app_id>:<table>`` = ``batch_id``; None when that
    batch is committed already (its re-run after a crash). Returns delta-rs's merge metrics, summed.

    Two MERGEs, deletes then the rest (one key is in one of them only: ``source`` holds one change per key), not
    :func:`merge_plan`'s one statement: delta-rs 1.6 writes an all-null change-data-feed row for every source row
    that matches nothing and is not inserted (a delete of a key silver does not hold), which a NOT NULL key column
    refuses and which would otherwise land in ``table_changes``. The deletes' commit carries no transaction (so a
    crash after it re-runs both; both are position-guarded no-ops where they landed)."""
    import pyarrow.compute as pc
    from deltalake import CommitProperties, Transaction

    require_write_mode(table.name, MERGE_BY_POSITION)
    txn = table.txn(app_id)
    if table.committed(app_id, batch_id):
        return None
    plan = merge_plan(keys, source.column_names, toastable, quote=quote_sql)
    is_delete = pc.equal(source["_op"], "d")
    deletes, upserts = source.filter(is_delete), source.filter(pc.invert(is_delete))
    totals: dict[str, Any] = {}

    def run(rows: pa.Table, last: bool, build: Callable[[Any], Any]) -> None:
        properties = CommitProperties(app_transactions=[Transaction(txn, batch_id)]) if last else None
        before = table.table.version()
        merger = table.table.merge(rows, plan.condition, source_alias="s", target_alias="t",
                                   commit_properties=properties)
        for name, value in build(merger).execute().items():
            if isinstance(value, int):
                totals[name] = totals.get(name, 0) + value
        table.refresh()
        totals["commits"] = totals.get("commits", 0) + int(table.table.version() > before)

    if deletes.num_rows:
        run(deletes, not upserts.num_rows, lambda m: m.when_matched_delete(predicate=plan.newer))
    if upserts.num_rows:
        run(upserts, True, lambda m: m.when_matched_update(updates=dict(plan.update_set), predicate=plan.newer)
            .when_not_matched_insert(updates=dict(plan.insert_values)))
    return totals
