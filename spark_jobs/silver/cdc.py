"""CDC apply rules: Debezium PostgreSQL change events -> ordered, typed changes for silver.

The rules and the MERGE statement; no I/O. The streaming app applies them per
micro-batch and table in the driver (:mod:`spark_jobs.silver.cdc_arrow`)::

    parsed   = parse_records(raw_batch, row schema, contract.keys)   # rejects -> quarantine.cdc
    newest   = newest_changes(parsed.changes, ...)                  # newest change per key
    plan     = merge_plan(contract.keys, silver_columns(...), toastable_columns(...))
    MERGE INTO silver.<table> t USING newest s ON plan.condition
      WHEN MATCHED AND plan.delete_condition THEN DELETE
      WHEN MATCHED AND plan.update_condition THEN UPDATE SET plan.update_set
      WHEN NOT MATCHED AND plan.insert_condition THEN INSERT plan.insert_values

Ordering (the source position)
------------------------------
``_pos = struct(_snapshot_rank, _commit_lsn, _change_lsn)``, compared
lexicographically; larger is newer. Never ``ts_ms``: wall-clock times tie and
can go backwards.

* ``_snapshot_rank`` is 0 for snapshot reads (``op = r``) and 1 for streamed
  changes, and it comes *first*, so a snapshot read always loses to any streamed
  change of the same key whatever the LSNs say. A snapshot read carries the LSN
  of the snapshot's start (or, for incremental snapshots, of the chunk's window),
  which says nothing about how it relates to a streamed change. Among snapshot
  reads (a re-snapshot) the later one wins.
* ``_commit_lsn`` is the first element of ``source.sequence``: the commit LSN of
  the last transaction Debezium saw commit before this event's transaction.
  pgoutput decodes whole transactions in commit order, so this value is constant
  inside a transaction and never decreases from one transaction to the next.
* ``_change_lsn`` is the second element (the change's own LSN, = ``source.lsn``).
  It orders the changes inside one transaction. It is *not* monotone across
  transactions: two transactions running concurrently interleave their WAL
  records, so a transaction that commits later can hold changes with lower LSNs
  than one that committed earlier. Ordering by the change LSN alone (or by
  ``ts_ms``) would apply them in the wrong order; (commit, change) does not.
* When ``sequence`` (or one of its elements) is missing, ``source.lsn`` stands
  in; a change with no position at all is rejected, it cannot be ordered.

A change applies only if its position is strictly greater than the row's, so
replays after a crash and duplicates re-sent by Connect are no-ops.

Merge-on-read
-------------
A copy-on-write MERGE rewrites every file holding a changed row, and OLTP
updates hit rows all over a table: with ``silver.customers`` at 192 MB (large
TOASTed text) each one-second batch rewrote nearly all of it (measured with
``lake bench cdc``), so the apply cost grew with the table, not with the change
rate. So each silver table is three Delta tables and a view:

* ``silver.<t>__changes``: per batch, the newest change of each key (TOAST
  placeholders filled from earlier changes of the batch), deletes included,
  appended with the batch id in ``_batch_id`` (the partition column). Cheap
  whatever the table's size; this is what makes a change visible.
* ``silver.<t>__base``: one row per key as of the last compaction. A background
  compaction MERGEs the pending changes into it (newest per key across batches,
  :func:`merge_plan`'s statement), then the batch loop drops the changes of the
  compaction *before* that one (a lag of one compaction, so a query that read
  the base just before a compaction still finds the changes it needs).
* ``silver.<t>__deleted``: delete markers (stale re-sends must not resurrect a key).
* ``silver.<t>``: the view (:func:`current_view_sql`): base and changes unioned,
  per key the newest row by position, not a delete, with a TOAST placeholder
  replaced by the newest earlier real value of that key. The rules are the
  MERGE's, so the view equals what the MERGE would have given (tested against
  each other in tests/unit/test_cdc_arrow.py).

Added columns
-------------
A column added in PostgreSQL mid-stream shows up in the payload before the table
contract knows it. The parse never drops it: every payload column that is not
in the table's schema goes into ``_extra``, a JSON object string mapping column
name to the value's JSON text (strings unquoted, numbers and objects as written;
null when there are no extra columns). ``added_columns`` compares a payload's
fields with a schema; once the silver table is widened, the same raw records
are parsed again with the wider schema, so nothing is lost meanwhile.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from pyspark.sql.types import StringType, StructType

#: Debezium's stand-in for an unchanged TOASTed value it could not read from the WAL.
UNAVAILABLE_VALUE = "__debezium_unavailable_value"

#: Ops that change one row: create, update, delete, snapshot read.
ROW_OPS = ("c", "u", "d", "r")

SNAPSHOT_RANK = 0
STREAM_RANK = 1

#: Scalar position columns, most significant first; silver stores them so MERGE can compare.
POSITION_COLUMNS = ("_snapshot_rank", "_commit_lsn", "_change_lsn")

#: Metadata columns a silver table stores next to the row image.
SILVER_METADATA_COLUMNS = ("_op", *POSITION_COLUMNS, "_source_ts", "_extra")

#: Column of ``silver.<t>__changes`` (and its partition column): the streaming batch that appended the change.
BATCH_COLUMN = "_batch_id"


def quote_ident(name: str) -> str:
    """Backtick-quote an identifier for Spark SQL."""
    return "`" + name.replace("`", "``") + "`"


def silver_columns(table_schema: StructType) -> list[str]:
    """Columns a silver CDC table stores: the row image, then ``SILVER_METADATA_COLUMNS``."""
    return [*table_schema.names, *SILVER_METADATA_COLUMNS]


def toastable_columns(table_schema: StructType, key_columns: Sequence[str]) -> list[str]:
    """Default TOAST-able columns: non-key string columns (text, varchar, json, jsonb arrive as strings).

    Only these can hold ``UNAVAILABLE_VALUE``; a contract may list fewer.
    """
    return toastable_columns_of([(f.name, isinstance(f.dataType, StringType)) for f in table_schema.fields],
                                key_columns)


def toastable_columns_of(columns: Sequence[tuple[str, bool]], key_columns: Sequence[str]) -> list[str]:
    """:func:`toastable_columns` over (name, is a string column) pairs, in column order."""
    return [name for name, is_string in columns if is_string and name not in key_columns]


def added_columns(current: StructType | Sequence[str], incoming: Sequence[str]) -> list[str]:
    """Payload column names that ``current`` (a schema or its column names) lacks, in payload order, each once.

    Spark resolves names case-insensitively, so ``Note`` is not new if ``note`` exists.
    """
    known = {n.lower() for n in (current.names if isinstance(current, StructType) else current)}
    out: list[str] = []
    for name in incoming:
        if name.lower() not in known:
            known.add(name.lower())
            out.append(name)
    return out


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


def current_view_sql(base: str, changes: str, columns: Sequence[str], key_columns: Sequence[str],
                     toastable: Sequence[str] = (), quote: Callable[[str], str] = quote_ident) -> str:
    """The ``SELECT`` of the ``silver.<t>`` view: the newest row per key of ``base`` and ``changes``.

    ``columns`` are the base table's (row image + ``SILVER_METADATA_COLUMNS``);
    ``changes`` has them plus ``BATCH_COLUMN``. Per key, rows are ordered by
    position, then by batch, with the base row after a change of the same
    position (a change already compacted: the base holds its result); the last
    one is kept unless it is a delete. When that is the base row it is shown as
    stored (the MERGE ignores changes not newer than the row). When it is a
    change, a ``toastable`` column holding ``UNAVAILABLE_VALUE`` takes the last
    earlier value of the key that is not the placeholder (NULL counts), else
    keeps it: the MERGE's "keep the stored value" and the in-memory fill of
    ``cdc_arrow.newest_changes`` / ``compaction_source`` in one rule. So the
    view shows the same before and after a compaction, as long as each key's
    pending changes are a contiguous run of its log (what Debezium sends and
    re-sends); tests/unit/test_cdc_arrow.py checks it on random runs.
    One window, one sort per query.
    """
    cols = list(columns)
    missing = [c for c in [*key_columns, *POSITION_COLUMNS, "_op"] if c not in cols]
    if missing or not key_columns:
        raise ValueError(f"current_view_sql: key columns {list(key_columns)} and {missing or 'the metadata'} "
                         f"must be among the columns {cols}")
    listed = ", ".join(quote(c) for c in cols)
    keys = ", ".join(quote(k) for k in key_columns)
    order = ", ".join(quote(c) for c in [*POSITION_COLUMNS, "_src", "_seq"])
    window = f"(PARTITION BY {keys} ORDER BY {order} ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING)"
    fills = "".join(
        f", last(IF({quote(c)} <=> '{UNAVAILABLE_VALUE}', NULL, named_struct('v', {quote(c)})), true) OVER {window} "
        f"AS {quote('_fill_' + c)}" for c in toastable)
    out = ", ".join(f"IF(`_src` = 1 OR {quote('_fill_' + c)} IS NULL, {quote(c)}, {quote('_fill_' + c)}.v) "
                    f"AS {quote(c)}" if c in toastable else quote(c) for c in cols)
    return (f"SELECT {out} FROM ("
            f"SELECT *, row_number() OVER (PARTITION BY {keys} ORDER BY {order}) AS `_n`, "
            f"count(1) OVER {window} AS `_count`{fills} FROM ("
            f"SELECT {listed}, 1 AS `_src`, CAST(-1 AS BIGINT) AS `_seq` FROM {base} UNION ALL "
            f"SELECT {listed}, 0 AS `_src`, CAST({quote(BATCH_COLUMN)} AS BIGINT) AS `_seq` FROM {changes})) "
            f"WHERE `_n` = `_count` AND `_op` <> 'd'")
