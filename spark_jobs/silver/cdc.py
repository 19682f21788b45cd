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


def _q(name: str) -> str:
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
                    quote: Callable[[str], str] = _q) -> str:
    """``t.`k1` = s.`k1` AND ...``: the MERGE match condition on the primary key."""
    if not key_columns:
        raise ValueError("key_columns is empty: a MERGE needs the table's primary key columns")
    return " AND ".join(f"{target}.{quote(k)} = {source}.{quote(k)}" for k in key_columns)


def newer_condition(target: str = "t", source: str = "s", quote: Callable[[str], str] = _q) -> str:
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
    quote: Callable[[str], str] = _q,
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
