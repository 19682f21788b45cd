"""Bronze CDC records of one table -> its typed change history, parsed in Spark (pure: DataFrame in, DataFrame out).

Where silver keeps the newest row per key, gold dimensions need every change in
source order (:mod:`spark_jobs.gold.dims`). Bronze keeps every raw Debezium
record forever, so the history is re-derived from it on each run: the same
bronze gives the same history.

The rules are silver's (:mod:`spark_jobs.silver.cdc`, :func:`spark_jobs.silver.cdc_parse._position`):

* a record value is the Debezium payload JSON (``schemas.enable=false``) or a
  JsonConverter envelope ``{"schema": .., "payload": {..}}``; both are read;
* position = (``_snapshot_rank``, ``_commit_lsn``, ``_change_lsn``): rank 0 for
  ``op = r`` or ``source.snapshot`` other than ``"false"``, else 1; the two LSNs
  from ``source.sequence`` (``["<commit lsn>", "<change lsn>"]``), each falling
  back to ``source.lsn``. Never ``ts_ms``;
* the row image is ``after`` for c/u/r and ``before`` for d; key columns missing
  from the image come from the Kafka key;
* tombstones (null value) are skipped, and so are records that cannot be
  ordered or typed: not JSON, no op, an op other than c/u/d/r (truncate,
  messages), no row image, no key, no position, a value that does not cast to
  its column's type. (The streaming app quarantines those; here they are
  simply not history.)
* TOAST placeholders (``__debezium_unavailable_value``) in string columns take
  the key's newest earlier value by position (a real NULL counts as a value);
  with no earlier change of the key the placeholder stays, as in silver.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, StringType, StructField, StructType

from spark_jobs.contracts.shop import CdcTable
from spark_jobs.silver.cdc import UNAVAILABLE_VALUE, toastable_columns
from spark_jobs.silver.cdc_columns import POSITION_COLUMNS, ROW_OPS, SNAPSHOT_RANK, STREAM_RANK

__all__ = ["cdc_history", "fill_toast", "history_columns"]

_S = StringType()


#: Epoch milliseconds of 0001-01-01T00:00:00Z and 9999-12-31T23:59:59.999Z: the range of Spark's timestamps.
MIN_TS_MS, MAX_TS_MS = -62_135_596_800_000, 253_402_300_799_999


def _strings(names: list[str]) -> StructType:
    return StructType([StructField(n, _S) for n in names])


def _payload_schema(columns: list[str]) -> StructType:
    """Debezium payload with every row column as a string (numbers, booleans and JSON keep their JSON text)."""
    image = _strings(columns)
    return StructType([
        StructField("before", image), StructField("after", image),
        StructField("source", _strings(["lsn", "sequence", "snapshot", "ts_ms"])),
        StructField("op", _S), StructField("ts_ms", _S),
    ])


_ENVELOPE = _strings(["schema", "payload"])


def _unwrap(text: Column) -> Column:
    """JSON text -> the payload's JSON text: the ``payload`` of a JsonConverter envelope, else the text itself."""
    env = F.from_json(text, _ENVELOPE)
    return F.when(env["schema"].isNotNull() | env["payload"].isNotNull(), env["payload"]).otherwise(text)


def history_columns(contract: CdcTable) -> list[str]:
    """Column order of :func:`cdc_history`'s output."""
    return ["op", *contract.schema.names, *POSITION_COLUMNS, "_source_ts"]


def fill_toast(frame: DataFrame, keys: list[str], columns: list[str], order: list[str],
               unresolved: Column | None = None) -> DataFrame:
    """Replace ``UNAVAILABLE_VALUE`` in ``columns`` by the key's newest earlier value (by ``order``).

    A real NULL counts as a value (it is what the row held). Where no earlier
    change of the key has a value, ``unresolved`` is used when given, else the
    placeholder stays. Grain and columns unchanged.
    """
    if not columns:
        return frame
    w = (Window.partitionBy(*keys).orderBy(*order)
         .rowsBetween(Window.unboundedPreceding, Window.currentRow))
    out = frame
    for c in columns:
        held = F.last(F.when(F.col(c).eqNullSafe(F.lit(UNAVAILABLE_VALUE)), F.lit(None))
                      .otherwise(F.struct(F.col(c).alias("v"))), ignorenulls=True).over(w)
        fallback = F.col(c) if unresolved is None else unresolved
        out = out.withColumn(c, F.when(F.col(c).eqNullSafe(F.lit(UNAVAILABLE_VALUE)),
                                       F.when(held.isNull(), fallback).otherwise(held["v"])).otherwise(F.col(c)))
    return out


def cdc_history(bronze: DataFrame, contract: CdcTable) -> DataFrame:
    """Bronze rows of ``contract``'s topic -> one row per distinct change, typed.

    In: bronze rows (``key`` binary, ``value`` binary, ``partition`` int,
    ``offset`` long, ``kafka_timestamp`` timestamp; other columns ignored). Grain out: one row per (key,
    position); a change re-sent by Connect (same key, same position) appears
    once (its lowest Kafka partition/offset copy).

    Columns out (:func:`history_columns`): ``op`` (c/u/d/r); every column of
    ``contract.schema`` with its type (numbers read as text, then cast; the
    row image is ``after`` for c/u/r and ``before`` for d); ``_snapshot_rank``
    int; ``_commit_lsn`` bigint; ``_change_lsn`` bigint; ``_source_ts``
    timestamp (``source.ts_ms``, else the payload's ``ts_ms``, else the
    record's Kafka timestamp; for lineage and as the fallback ``valid_from``,
    never for ordering). Not ordered.
    """
    names = contract.schema.names
    payload = F.from_json(_unwrap(F.col("value").cast("string")), _payload_schema(names))
    key_doc = F.from_json(_unwrap(F.col("key").cast("string")), _strings(list(contract.keys)))

    staged = (bronze.where(F.col("value").isNotNull())
              .select(payload.alias("_p"), key_doc.alias("_k"), F.col("partition").alias("_kp"),
                      F.col("offset").alias("_ko"), F.col("kafka_timestamp").alias("_kt")))
    op = F.col("_p.op")
    image = F.when(op == "d", F.col("_p.before")).otherwise(F.col("_p.after"))
    source = F.col("_p.source")
    sequence = F.from_json(source["sequence"], ArrayType(_S))
    lsn = source["lsn"].try_cast("bigint")
    # F.get: NULL past the array's end (getItem fails under ANSI on a forged "sequence": "[]").
    commit = F.coalesce(F.get(sequence, 0).try_cast("bigint"), lsn)
    change = F.coalesce(F.get(sequence, 1).try_cast("bigint"), lsn)
    snapshot = (op == "r") | (source["snapshot"].isNotNull() & (F.lower(source["snapshot"]) != "false"))
    ts_ms = F.coalesce(source["ts_ms"].try_cast("bigint"), F.col("_p.ts_ms").try_cast("bigint"))
    # A time outside Spark's timestamps (years 1-9999) makes the record unreadable, as in the streaming parse
    # (quarantined there): converting it would overflow and fail the whole history read.
    ts_in_range = ts_ms.between(MIN_TS_MS, MAX_TS_MS)

    wires = {f.name: (F.coalesce(image[f.name], F.col("_k")[f.name]) if f.name in contract.keys else image[f.name])
             for f in contract.schema.fields}
    parsed = staged.select(
        op.alias("op"),
        ((op == "d") | image.isNotNull()).alias("_has_image"),
        *[w.alias("_w_" + n) for n, w in wires.items()],
        F.when(snapshot, F.lit(SNAPSHOT_RANK)).otherwise(F.lit(STREAM_RANK)).cast("int").alias("_snapshot_rank"),
        commit.alias("_commit_lsn"), change.alias("_change_lsn"),
        # Debezium always sends source.ts_ms; a record without one (forged) is dated by Kafka, so every version
        # has a valid_from (a NULL one fails gold's block rule: forged input must not stop the gold DAG).
        F.coalesce(F.when(ts_in_range, F.timestamp_millis(ts_ms)), F.col("_kt")).alias("_source_ts"),
        (ts_ms.isNull() | ts_in_range).alias("_ts_ok"), "_kp", "_ko",
    )
    typed = parsed.select(
        "*", *[F.col("_w_" + f.name).try_cast(f.dataType).alias(f.name) for f in contract.schema.fields])
    # A wire value that does not cast makes the record unreadable, as in the streaming parse (quarantined there).
    castable = [F.col("_w_" + f.name).isNull() | F.col(f.name).isNotNull() for f in contract.schema.fields]
    keyed = [F.col(k).isNotNull() for k in contract.keys]
    ok = F.col("op").isin(*ROW_OPS) & F.col("_has_image") & F.col("_commit_lsn").isNotNull() \
        & F.col("_change_lsn").isNotNull() & F.col("_ts_ok")
    for cond in [*castable, *keyed]:
        ok = ok & cond
    good = typed.where(ok)

    keys = list(contract.keys)
    once = Window.partitionBy(*keys, *POSITION_COLUMNS).orderBy("_kp", "_ko")
    distinct = good.withColumn("_copy", F.row_number().over(once)).where(F.col("_copy") == 1)
    filled = fill_toast(distinct, keys, toastable_columns(contract.schema, keys), list(POSITION_COLUMNS))
    return filled.select(*history_columns(contract))
