"""CDC apply: Debezium PostgreSQL change events (as landed in bronze) -> ordered, typed changes for silver.

Pure transforms and SQL-string builders; no I/O, no session. The streaming app
does, per micro-batch and table::

    changes, rejects = parse_changes(bronze_batch, contract.schema, contract.keys)
    rejects  -> quarantine.cdc
    newest   = latest_per_key(changes, contract.keys)
    plan     = merge_plan(contract.keys, silver_columns(contract.schema), toastable_columns(...))
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
contract knows it. ``parse_changes`` never drops it: every payload column that is
not in ``table_schema`` goes into ``_extra``, a JSON object string mapping column
name to the value's JSON text (strings unquoted, numbers and objects as written;
null when there are no extra columns). ``extra_column_names`` lists them and
``added_columns`` compares a payload's fields with a schema; once the contract
(and the silver table) are widened, re-parse the same bronze rows with the wider
schema: bronze keeps the raw bytes, so nothing is lost meanwhile.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    DateType,
    DecimalType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

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

#: Columns of the rejects frame (-> ``quarantine.cdc``).
REJECT_SCHEMA = StructType(
    [
        StructField("raw_key", BinaryType()),
        StructField("raw_value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("error", StringType()),
        StructField("kafka_timestamp", TimestampType()),
    ]
)

_CORRUPT = "_corrupt_record"
_STRING_MAP = "map<string,string>"
_JSON_OPTIONS = {"columnNameOfCorruptRecord": _CORRUPT, "mode": "PERMISSIVE"}

_SOURCE_SCHEMA = StructType(
    [
        StructField("lsn", LongType()),
        StructField("txId", LongType()),
        StructField("sequence", StringType()),
        # A string enum in Debezium 2+ ("true", "last", "false", "incremental", ...);
        # older versions send a boolean, which a string field reads as "true"/"false".
        StructField("snapshot", StringType()),
        StructField("ts_ms", LongType()),
        StructField("db", StringType()),
        StructField("schema", StringType()),
        StructField("table", StringType()),
    ]
)

# Row images stay raw JSON text here; they are parsed against the table's own wire schema below,
# so a row that does not fit the table is told apart from a record that is not JSON at all.
_ENVELOPE_SCHEMA = StructType(
    [
        StructField(
            "payload",
            StructType(
                [
                    StructField("before", StringType()),
                    StructField("after", StringType()),
                    StructField("source", _SOURCE_SCHEMA),
                    StructField("op", StringType()),
                    StructField("ts_ms", LongType()),
                ]
            ),
        ),
        StructField(_CORRUPT, StringType()),
    ]
)


def _wire_type(field: StructField) -> DataType:
    """The JSON type Debezium sends for a column whose silver type is ``field.dataType``.

    Assumes the connector's ``decimal.handling.mode=string``, ``time.precision.mode=adaptive``
    (date = days since epoch, timestamptz = ISO-8601 string) and ``binary.handling.mode=base64``.
    """
    dt = field.dataType
    if isinstance(dt, DecimalType | TimestampType | BinaryType):
        return StringType()
    if isinstance(dt, DateType):
        return IntegerType()
    if isinstance(dt, TimestampNTZType):
        raise ValueError(
            f"column {field.name!r}: timestamp_ntz (PostgreSQL 'timestamp without time zone') is not supported "
            "by CDC parse yet; declare the column as timestamptz in PostgreSQL or as a long (micros) in the contract"
        )
    return dt


def _decode(wire: Column, dt: DataType) -> Column:
    """Wire value -> silver type. Fallible conversions use ``try_*`` so a bad value rejects its row, not the batch."""
    if isinstance(dt, DecimalType):
        return wire.try_cast(dt)
    if isinstance(dt, TimestampType):
        return wire.try_cast(TimestampType())
    if isinstance(dt, DateType):
        return F.date_from_unix_date(wire)
    if isinstance(dt, BinaryType):
        return F.try_to_binary(wire, F.lit("base64"))
    return wire


def _fallible(dt: DataType) -> bool:
    return isinstance(dt, DecimalType | TimestampType | BinaryType)


def _q(name: str) -> str:
    """Backtick-quote an identifier for Spark SQL."""
    return "`" + name.replace("`", "``") + "`"


def _check_keys(table_schema: StructType, key_columns: Sequence[str]) -> None:
    if not key_columns:
        raise ValueError("key_columns is empty: CDC apply needs the table's primary key columns")
    missing = [k for k in key_columns if k not in table_schema.names]
    if missing:
        raise ValueError(f"key column(s) {missing} are not in the table schema {table_schema.names}")


def position_col() -> Column:
    """The ordering key ``_pos = struct(_snapshot_rank, _commit_lsn, _change_lsn)``; larger is newer.

    See the module docstring for why this order and why never ``ts_ms``.
    """
    return F.struct(*[F.col(c) for c in POSITION_COLUMNS])


def parse_changes(
    bronze_df: DataFrame, table_schema: StructType, key_columns: Sequence[str]
) -> tuple[DataFrame, DataFrame]:
    """Split bronze CDC records of one table into typed changes and rejects.

    In: bronze rows (key binary, value binary nullable, topic, partition int,
    offset long, kafka_timestamp, ingest_time) holding Debezium JsonConverter
    envelopes with ``schemas.enable=true``. ``table_schema`` is the silver row
    image (name and type per column); ``key_columns`` its primary key.

    Out ``changes`` (grain: one row per change event, i.e. per non-tombstone
    record that parses): the ``table_schema`` columns in order, typed (NUMERIC
    string -> decimal, ISO-8601 -> timestamp, days -> date, base64 -> binary,
    JSON kept as string; the TOAST placeholder passes through in string
    columns), taken from ``after`` (c/u/r) or ``before`` (d), key columns
    falling back to the Kafka key; then ``_op`` string, ``_commit_lsn`` long,
    ``_change_lsn`` long, ``_snapshot`` boolean, ``_snapshot_rank`` int,
    ``_pos`` struct, ``_source_ts`` timestamp (source commit time, for latency
    only), ``_extra`` string (payload columns not in ``table_schema``, see the
    module docstring), ``_topic``, ``_partition``, ``_offset``.

    Out ``rejects`` (grain: one row per rejected record; columns as
    ``REJECT_SCHEMA``): records that are not JSON objects, lack a payload or op,
    have an op that is not a row change (unknown, or truncate), lack a row image
    or a key column, do not fit the table's types, or carry no source position.

    Tombstones (value null, sent after each delete for log compaction) are
    skipped: bronze records = changes + rejects + tombstones. Primary-key
    updates arrive as a delete of the old key and a create of the new key and
    come out as those two ordinary changes. Both frames derive from
    ``bronze_df``; the streaming app uses :func:`parse_records` +
    :func:`split_parsed` instead so it can persist the parsed frame once and
    take both from it (the JSON is then parsed once per batch, not once per
    action).
    """
    return split_parsed(parse_records(bronze_df, table_schema, key_columns))


#: Columns of :func:`parse_records` besides the row image (``PARSED_META`` + row image = its schema).
PARSED_META = (
    "_op", "_commit_lsn", "_change_lsn", "_snapshot", "_snapshot_rank", "_source_ts", "_extra",
    "_topic", "_partition", "_offset", "_kafka_timestamp", "_error", "_raw_key", "_raw_value",
)


def parse_records(bronze_df: DataFrame, table_schema: StructType, key_columns: Sequence[str]) -> DataFrame:
    """Parse bronze CDC records of one table once: one row per non-tombstone record, good or bad.

    Columns: the ``table_schema`` columns (typed; meaningless when ``_error``
    is set), then ``PARSED_META``: ``_op``, the position columns, ``_snapshot``,
    ``_source_ts``, ``_extra`` (see :func:`parse_changes`), the Kafka
    coordinates ``_topic``/``_partition``/``_offset``/``_kafka_timestamp``,
    ``_error`` (null for a good change, else why the record is rejected), and
    ``_raw_key``/``_raw_value``: the raw record, kept *only* on rejected rows so
    a persisted parsed frame does not hold a second copy of every payload.
    :func:`split_parsed` turns it into ``(changes, rejects)``.
    """
    _check_keys(table_schema, key_columns)
    fields = list(table_schema.fields)
    wire_schema = StructType([StructField(f.name, _wire_type(f)) for f in fields] + [StructField(_CORRUPT, StringType())])
    key_schema = StructType(
        [StructField("payload", StructType([StructField(f.name, _wire_type(f)) for f in fields if f.name in key_columns]))]
    )

    env = F.from_json(F.col("value").cast("string"), _ENVELOPE_SCHEMA, _JSON_OPTIONS)
    staged = bronze_df.where(F.col("value").isNotNull()).select("*", env.alias("_env"))
    payload = F.col("_env.payload")
    op = F.col("_env.payload.op")
    source = F.col("_env.payload.source")
    image_json = F.when(op == "d", payload["before"]).otherwise(payload["after"])
    staged = staged.select(
        "*",
        F.from_json(image_json, wire_schema, _JSON_OPTIONS).alias("_img"),
        # Only the field names (values are skipped, not decoded): telling whether the image has
        # columns the table lacks is then cheap; the map below is built only when it does.
        F.json_object_keys(image_json).alias("_img_keys"),
        F.from_json(F.col("key").cast("string"), key_schema).alias("_key"),
        F.from_json(source["sequence"], ArrayType(StringType())).alias("_seq"),
        image_json.alias("_img_json"),
    )

    wires: dict[str, Column] = {}
    typed: dict[str, Column] = {}
    for f in fields:
        wire = F.col("_img")[f.name]
        if f.name in key_columns:
            wire = F.coalesce(wire, F.col("_key.payload")[f.name])
        wires[f.name] = wire
        typed[f.name] = _decode(wire, f.dataType)

    commit_lsn = F.coalesce(F.get(F.col("_seq"), 0).try_cast(LongType()), source["lsn"])
    change_lsn = F.coalesce(F.get(F.col("_seq"), 1).try_cast(LongType()), source["lsn"])
    snapshot_flag = source["snapshot"]
    is_snapshot = (op == "r") | F.coalesce(snapshot_flag.isNotNull() & (F.lower(snapshot_flag) != "false"), F.lit(False))

    known = F.array(*[F.lit(f.name) for f in fields])
    unknown_keys = F.filter(F.col("_img_keys"), lambda k: ~F.array_contains(known, k))
    extra = F.map_filter(F.from_json(F.col("_img_json"), _STRING_MAP), lambda k, _v: ~F.array_contains(known, k))

    missing_keys = F.concat_ws(", ", *[F.when(wires[k].isNull(), F.lit(k)) for k in key_columns])
    bad_values = F.concat_ws(
        "; ",
        *[
            F.when(
                wires[f.name].isNotNull() & typed[f.name].isNull(),
                F.concat(
                    F.lit(f"column {f.name!r}: cannot convert '"),
                    wires[f.name].cast("string"),
                    F.lit(f"' to {f.dataType.simpleString()}"),
                ),
            )
            for f in fields
            if _fallible(f.dataType)
        ],
    )
    error = (
        F.when(
            F.col("_env").isNull() | F.col("_env")[_CORRUPT].isNotNull(),
            F.lit("value is not a JSON object (not UTF-8 JSON, truncated, or not written by the JsonConverter)"),
        )
        .when(
            payload.isNull(),
            F.lit("envelope has no 'payload': expected Debezium JsonConverter output with schemas.enable=true"),
        )
        .when(op.isNull(), F.lit("payload has no 'op'"))
        .when(
            op == "t",
            F.lit("op 't' (truncate) removes every row and has no key: truncate the silver table by hand or re-snapshot"),
        )
        .when(~op.isin(*ROW_OPS), F.concat(F.lit("unknown op '"), op, F.lit("' (expected one of c, u, d, r)")))
        .when((op != "d") & payload["after"].isNull(), F.concat(F.lit("op '"), op, F.lit("' has no 'after' row image")))
        .when(
            F.col("_img")[_CORRUPT].isNotNull(),
            F.concat(
                F.lit("row image does not match the table schema ("),
                F.lit(", ".join(f"{f.name} {f.dataType.simpleString()}" for f in fields)),
                F.lit(")"),
            ),
        )
        .when(
            missing_keys != "",
            F.concat(F.lit("missing key column(s) "), missing_keys, F.lit(" in the row image and the Kafka key")),
        )
        .when(
            commit_lsn.isNull() | change_lsn.isNull(),
            F.lit("source has neither 'sequence' nor 'lsn': the change cannot be ordered"),
        )
        .when(bad_values != "", bad_values)
    )

    checked = staged.select(
        "*",
        error.alias("_error"),
        commit_lsn.alias("_commit_lsn"),
        change_lsn.alias("_change_lsn"),
        is_snapshot.alias("_snapshot"),
    )
    return checked.select(
        *[typed[f.name].cast(f.dataType).alias(f.name) for f in fields],
        op.alias("_op"),
        F.col("_commit_lsn"),
        F.col("_change_lsn"),
        F.col("_snapshot"),
        F.when(F.col("_snapshot"), F.lit(SNAPSHOT_RANK)).otherwise(F.lit(STREAM_RANK)).alias("_snapshot_rank"),
        F.timestamp_millis(source["ts_ms"]).alias("_source_ts"),
        F.when(F.size(unknown_keys) > 0, F.to_json(extra)).alias("_extra"),
        F.col("topic").alias("_topic"),
        F.col("partition").alias("_partition"),
        F.col("offset").alias("_offset"),
        F.col("kafka_timestamp").alias("_kafka_timestamp"),
        F.col("_error"),
        F.when(F.col("_error").isNotNull(), F.col("key")).alias("_raw_key"),
        F.when(F.col("_error").isNotNull(), F.col("value")).alias("_raw_value"),
    )


def split_parsed(parsed: DataFrame) -> tuple[DataFrame, DataFrame]:
    """:func:`parse_records` output -> ``(changes, rejects)`` as documented in :func:`parse_changes`."""
    row_image = [c for c in parsed.columns if c not in PARSED_META]
    changes = parsed.where(F.col("_error").isNull()).select(
        *row_image,
        "_op",
        "_commit_lsn",
        "_change_lsn",
        "_snapshot",
        "_snapshot_rank",
        position_col().alias("_pos"),
        "_source_ts",
        "_extra",
        "_topic",
        "_partition",
        "_offset",
    )
    rejects = parsed.where(F.col("_error").isNotNull()).select(
        F.col("_raw_key").alias("raw_key"),
        F.col("_raw_value").alias("raw_value"),
        F.col("_topic").alias("topic"),
        F.col("_partition").alias("partition"),
        F.col("_offset").alias("offset"),
        F.col("_error").alias("error"),
        F.col("_kafka_timestamp").alias("kafka_timestamp"),
    )
    return changes, rejects


def fill_toast_within_batch(changes: DataFrame, key_columns: Sequence[str], toastable: Sequence[str]) -> DataFrame:
    """Replace a TOAST placeholder with the value an earlier change of the same key in this batch carried.

    ``latest_per_key`` keeps one change per key; if that change holds
    ``UNAVAILABLE_VALUE`` and the value was set by an earlier change in the same
    batch (an insert then an update that left the column untouched), the MERGE
    would otherwise have nothing to keep. Earlier NULLs count as values. When no
    earlier change in the batch has a value, the placeholder stays and the MERGE
    keeps the stored value. Grain and columns unchanged.
    """
    if not toastable:
        return changes
    w = (Window.partitionBy(*key_columns).orderBy(F.col("_pos"), F.col("_partition"), F.col("_offset"))
         .rowsBetween(Window.unboundedPreceding, Window.currentRow))
    out = changes
    for c in toastable:
        real = F.when(F.col(c).isNull() | (F.col(c) != F.lit(UNAVAILABLE_VALUE)), F.struct(F.col(c).alias("v")))
        last_real = F.last(real, ignorenulls=True).over(w)
        out = out.withColumn(
            c, F.when((F.col(c) == F.lit(UNAVAILABLE_VALUE)) & last_real.isNotNull(), last_real.getField("v"))
            .otherwise(F.col(c)))
    return out


def latest_per_key(changes: DataFrame, key_columns: Sequence[str]) -> DataFrame:
    """Keep only the newest change per key, by ``_pos``.

    In: ``parse_changes`` output (any rows of one table). Out: same columns,
    grain one row per key. Equal positions (the same event delivered twice)
    are broken by the highest (``_partition``, ``_offset``), so the result is
    deterministic. A batch may end on a delete for a key: that row is kept so
    the MERGE can delete the target row.
    """
    if not key_columns:
        raise ValueError("key_columns is empty: latest_per_key needs the table's primary key columns")
    order = Window.partitionBy(*key_columns).orderBy(
        F.col("_pos").desc(), F.col("_partition").desc(), F.col("_offset").desc()
    )
    return changes.withColumn("_rn", F.row_number().over(order)).where(F.col("_rn") == 1).drop("_rn")


def drop_superseded_by_delete(newest: DataFrame, deletes: DataFrame, key_columns: Sequence[str]) -> DataFrame:
    """Drop the changes not newer than a recorded delete of their key (stale re-sends after a delete).

    ``deletes`` holds delete markers (the key columns and ``POSITION_COLUMNS``),
    any number per key: the streaming app appends one per applied delete and
    never updates them, so a key deleted twice has two. A change survives when
    no marker of its key is at its position or later, which is the same as
    being newer than the key's newest marker. Silver no longer holds a deleted
    row, so without this an old insert re-sent by Connect would bring it back.
    Grain and columns of ``newest`` unchanged.
    """
    same_key = [F.col(f"s.{_q(k)}") == F.col(f"d.{_q(k)}") for k in key_columns]
    not_newer = ~F.expr(newer_condition("d", "s"))
    markers = deletes.select(*[F.col(_q(k)) for k in key_columns], *POSITION_COLUMNS).alias("d")
    return newest.alias("s").join(markers, [*same_key, not_newer], "left_anti")


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


def extra_column_names(changes: DataFrame) -> DataFrame:
    """Distinct payload column names found in ``_extra``; grain one row per name, column ``column`` string."""
    keys = F.map_keys(F.from_json(F.col("_extra"), _STRING_MAP))
    return changes.where(F.col("_extra").isNotNull()).select(F.explode(keys).alias("column")).distinct()


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
