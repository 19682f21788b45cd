"""CDC parse on Spark executors: raw Debezium records (Arrow batches) -> typed changes and rejects.

The streaming app's CDC query (``spark_jobs.streaming.cdc``) runs :func:`parse_batches`
through ``mapInArrow`` (``spark_jobs.silver.cdc.parse_frame``), so the parse runs in
Spark's Python workers, one task per Kafka offset range; the driver never sees a record.
It keeps the rules of :mod:`spark_jobs.silver.cdc` (read its module docstring: the
source position, snapshot rank, TOAST placeholder, added columns):

* :func:`parse_records`: one pass of Python over the records (orjson, one ``loads``
  of each Debezium envelope) gives, per record, a :class:`Change` (typed row image,
  op, position) or a :class:`Reject` with the reason. Types come from the silver
  table's schema, so a widened table types its new columns on the next parse.
* :func:`parse_batches`: both as rows of one Arrow schema (:func:`parse_output_schema`):
  the silver columns plus the Kafka coordinates, and for a reject the raw record and
  its reason (the silver columns then null).

Why Python and not ``from_json``: the rules (typed conversion with reasons per column,
a Kafka-key fallback for the key, ``_extra`` for unknown columns, the position from
``source.sequence``) are one pass here, an order of magnitude cheaper than ``from_json``
plus the checks (docs/benchmarks.md).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson
import pyarrow as pa

from spark_jobs.silver.cdc_columns import (
    POSITION_COLUMNS,
    ROW_OPS,
    SILVER_METADATA_COLUMNS,
    SNAPSHOT_RANK,
    STREAM_RANK,
)
from spark_jobs.silver.cdc_convert import (
    BadWireValue,
    WireMismatch,
    clip,
    converter,
    json_kind,
    json_text,
    sql_type_name,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

    from pyspark.sql.types import StructType

__all__ = [
    "PARSE_COLUMNS", "Change", "Parsed", "Reject", "column_name_problem", "parse_batches", "parse_output_schema",
    "parse_records", "reserved_name", "row_schema", "sql_type_name",
]

Position = tuple[int, int, int]

NOT_JSON = "value is not a JSON object (not UTF-8 JSON, truncated, or not written by the JsonConverter)"
NO_PAYLOAD = "envelope has 'schema' but no 'payload': expected Debezium JsonConverter output"
NO_OP = "payload has no 'op'"
#: A record nested deeper than the parsers go (orjson stops at 1,024 levels, the stdlib's recursion limit
#: near 1,000): rejected like any unreadable record instead of failing the batch on every replay.
TOO_DEEP = "value is nested too deeply to parse (more than ~1,000 levels of objects/arrays)"
#: Characters Delta refuses in a column name unless the table uses column mapping.
#: A backtick too: Delta's MERGE with the change data feed cannot resolve such a column (packedCdc.`a`b`).
DELTA_INVALID_NAME_CHARS = frozenset(" ,;{}()\n\t=`")
TRUNCATE = "op 't' (truncate) removes every row and has no key: truncate the silver table by hand or re-snapshot"
NO_POSITION = "source has neither 'sequence' nor 'lsn': the change cannot be ordered"
#: PostgreSQL's limits (``NAMEDATALEN - 1`` bytes per identifier, ``MaxHeapAttributeNumber`` columns per table):
#: a row image past them was not written by Debezium from a PostgreSQL table.
PG_MAX_NAME_BYTES = 63
PG_MAX_COLUMNS = 1600
#: Silver stores positions as bigint; PostgreSQL's LSNs are unsigned 64-bit but stay below 2^63 (8 EiB of WAL).
_BIGINT = 2**63
#: ``_source_ts`` (epoch micros) must be a time Python and Spark both read: years 1 to 9999.
_MIN_MICROS, _MAX_MICROS = -62_135_596_800_000_000, 253_402_300_799_999_999


@dataclass
class Change:
    """One parsed row change: the typed row image (column order of the row schema) and its position."""

    values: list[Any]
    op: str
    pos: Position
    partition: int
    offset: int
    source_ts: int | None  # epoch micros of the PostgreSQL commit (latency only)
    extra: str | None  # payload columns the table lacks (``_extra``, see spark_jobs.silver.cdc)
    #: The record's row in the parsed input (to quarantine it if its values cannot be stored after all).
    index: int = field(default=-1, compare=False, repr=False)


@dataclass
class Reject:
    """A record that cannot be applied: raw bytes, Kafka coordinates and why."""

    key: bytes | None
    value: bytes | None
    topic: str
    partition: int
    offset: int
    kafka_timestamp: Any
    error: str


@dataclass
class Parsed:
    """:func:`parse_records` output: changes in input order, rejects, tombstones skipped, extra column names."""

    changes: list[Change]
    rejects: list[Reject]
    tombstones: int
    extra_columns: list[str]


def row_schema(silver: pa.Schema) -> pa.Schema:
    """The row image part of a silver table's Arrow schema (its columns minus the metadata)."""
    return pa.schema([f for f in silver if f.name not in SILVER_METADATA_COLUMNS])


def _as_long(v: Any) -> int | None:
    if type(v) is int:
        return v
    if isinstance(v, str):
        try:
            return int(v.strip())
        except ValueError:
            return None
    return None


def _position(op: str, source: Mapping[str, Any]) -> Position | None:
    lsn = source.get("lsn")
    lsn = lsn if type(lsn) is int else None
    seq: Any = source.get("sequence")
    items: list[Any] = []
    if isinstance(seq, str):
        try:
            parsed = _loads(seq)
        except ValueError:
            parsed = None
        if isinstance(parsed, list):
            items = parsed
    commit = _as_long(items[0]) if len(items) > 0 else None
    change = _as_long(items[1]) if len(items) > 1 else None
    commit = lsn if commit is None else commit
    change = lsn if change is None else change
    flag = source.get("snapshot")  # "true", "last", "incremental", "false"...; a boolean before Debezium 2
    snapshot = op == "r" or (flag is not None and str(flag).lower() != "false")
    if commit is None or change is None:
        return None
    return (SNAPSHOT_RANK if snapshot else STREAM_RANK, commit, change)


def parse_records(raw: pa.Table, rows: pa.Schema, keys: Sequence[str], refused: Collection[str] = ()) -> Parsed:
    """Parse one table's raw Kafka records (columns key, value, topic, partition, offset, kafka_timestamp).

    ``rows`` is the row image schema (:func:`row_schema` of the silver table),
    ``keys`` its primary key, ``refused`` payload column names the driver will not
    add to the table (PostgreSQL's table has no such column: forged, or dropped
    since). Tombstones (null value, sent after each delete for log compaction) are
    skipped and counted: records = changes + rejects + tombstones. A primary-key
    update arrives as a delete of the old key and a create of the new one: two
    ordinary changes. Rejected: records that are not JSON objects, lack a payload
    or op, have an op that is not a row change (unknown, or truncate), lack a row
    image or a key column (the Kafka key stands in for a key missing from the
    image), do not fit the table's types or ranges, carry no source position or
    one past bigint, carry a column name the lake reserves, Delta refuses or the
    driver ``refused``, or fail in any other way: a record never fails the batch.
    """
    if not keys:
        raise ValueError("key_columns is empty: CDC apply needs the table's primary key columns")
    names = rows.names
    missing = [k for k in keys if k not in names]
    if missing:
        raise ValueError(f"key column(s) {list(missing)} are not in the table schema {names}")
    convert = [converter(f) for f in rows]
    key_index = [names.index(k) for k in keys]
    known = set(names)
    schema_text = ", ".join(f"{f.name} {sql_type_name(f.type)}" for f in rows)
    types = [sql_type_name(f.type) for f in rows]
    refused_set = frozenset(refused)

    out = Parsed([], [], 0, [])
    extra_seen: dict[str, None] = {}
    columns = raw.to_pydict()
    for index, (key, value, topic, partition, offset, kafka_ts) in enumerate(zip(
            columns["key"], columns["value"], columns["topic"], columns["partition"], columns["offset"],
            columns["kafka_timestamp"], strict=True)):
        if value is None:
            out.tombstones += 1
            continue
        try:
            result = _change(key, value, names, convert, key_index, known, schema_text, types, refused_set)
        except RecursionError:  # the stdlib parse or a JSON re-serialisation of a deeply nested value
            result = TOO_DEEP
        except Exception as exc:  # noqa: BLE001 - whatever a record does, it is quarantined, never fails the batch
            result = unexpected_reason(exc)
        if isinstance(result, str):
            out.rejects.append(Reject(key, value, topic, partition, offset, kafka_ts, storable_text(result)))
            continue
        wires, op, pos, source_ts, extra, extra_names = result
        if extra_names:
            extra_seen.update(dict.fromkeys(extra_names))
        out.changes.append(Change(wires, op, pos, partition, offset, source_ts, extra, index))
    out.extra_columns = list(extra_seen)
    return out


def storable_text(text: str) -> str:
    """``text`` with what UTF-8 cannot hold (lone surrogates a forged value brought into a reason) escaped."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def unexpected_reason(exc: BaseException) -> str:
    """The reject reason of a record whose parse raised what no rule foresaw (the record, not the batch, fails)."""
    try:
        text = str(exc)
    except Exception:  # noqa: BLE001 - an exception whose text cannot be built still has a type
        text = ""
    return f"cannot parse the record: {type(exc).__name__}: {clip(text, 200)}"


def _loads(data: bytes | str) -> Any:
    """Parse JSON; orjson (faster on Debezium's envelopes), ``json`` for what it refuses.

    orjson refuses some valid JSON the stdlib reads (integers beyond 64 bits); the
    fallback keeps those records readable. Invalid JSON fails both (ValueError).
    """
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)


def _change(key: bytes | None, value: bytes, names: list[str], convert: list[tuple[Callable[[Any], Any], bool]],
            key_index: list[int], known: set[str], schema_text: str, types: list[str], refused: frozenset[str],
            ) -> str | tuple[list[Any], str, Position, int | None, str | None, list[str]]:
    """One record -> the reject reason, or (typed values, op, position, source micros, extra, extra names)."""
    try:
        doc = _loads(value)
    except (ValueError, UnicodeDecodeError):
        return NOT_JSON
    if not isinstance(doc, dict):
        return NOT_JSON
    # schemas.enable=false (the connector's setting): the record is the payload. A JsonConverter envelope
    # (schemas.enable=true: {"schema": ..., "payload": ...}) is read too, e.g. records written before.
    payload = doc.get("payload") if "payload" in doc or "schema" in doc else doc
    if payload is None:
        return NO_PAYLOAD
    if not isinstance(payload, dict):
        return NOT_JSON
    op = payload.get("op")
    if op is None:
        return NO_OP
    op = op if isinstance(op, str) else json_text(op)
    if op == "t":
        return TRUNCATE
    if op not in ROW_OPS:
        return f"unknown op '{clip(op)}' (expected one of c, u, d, r)"
    after = payload.get("after")
    if op != "d" and after is None:
        return f"op '{op}' has no 'after' row image"
    image = payload.get("before") if op == "d" else after
    field = "before" if op == "d" else "after"
    if image is not None and not isinstance(image, dict):
        return (f"'{field}' is a JSON {json_kind(image)}, not an object: the row image does not match the table "
                f"schema ({schema_text})")
    image = image or {}
    if len(image) > PG_MAX_COLUMNS:
        return (f"'{field}' has {len(image)} columns; a PostgreSQL table has at most {PG_MAX_COLUMNS}: not a row "
                "image Debezium wrote")
    # Wire type check first (a mismatch rejects the whole image), value conversion after the key check.
    wires = [image.get(name) for name in names]
    bad: list[str] = []
    for i, (fn, is_fallible) in enumerate(convert):
        if wires[i] is not None and not is_fallible:
            try:
                wires[i] = fn(wires[i])
            except WireMismatch:
                return (f"column {names[i]!r}: a JSON {json_kind(wires[i])} does not fit {types[i]}; the row image "
                        f"does not match the table schema ({schema_text})")
            except BadWireValue as exc:  # a number past the column type's range: reported after key and position
                bad.append(_bad_value(names[i], types[i], exc))
                wires[i] = None
    for i in key_index:
        if wires[i] is None:
            wires[i] = _key_value(key, names[i], convert[i])
    absent = [names[i] for i in key_index if wires[i] is None]
    if absent and not bad:
        return f"missing key column(s) {', '.join(absent)} in the row image and the Kafka key"
    source = payload.get("source")
    source = source if isinstance(source, dict) else {}
    pos = _position(op, source)
    if pos is None:
        return NO_POSITION
    outside = [(label, v) for label, v in (("commit LSN", pos[1]), ("change LSN", pos[2])) if not -_BIGINT <= v < _BIGINT]
    if outside:
        return "; ".join(f"source position: {label} {clip(str(v))} is outside the bigint range (source.sequence, "
                         "source.lsn)" for label, v in outside)
    ts_ms = source.get("ts_ms")
    source_ts = ts_ms * 1000 if type(ts_ms) is int else None
    if ts_ms is not None and (source_ts is None or not _MIN_MICROS <= source_ts <= _MAX_MICROS):
        # Debezium writes an int64 of milliseconds; anything else (orjson reads past 64 bits as a float) is forged.
        return (f"source.ts_ms {clip(str(ts_ms) if type(ts_ms) in (int, float) else json_kind(ts_ms))} is not "
                "milliseconds in the timestamp range (years 1 to 9999)")
    for i, name, type_name in ((i, names[i], types[i]) for i, (_, f) in enumerate(convert) if f):
        if wires[i] is not None:
            try:
                wires[i] = convert[i][0](wires[i])
            except BadWireValue as exc:
                bad.append(_bad_value(name, type_name, exc))
    if bad:
        return "; ".join(bad)
    extra_names = [k for k in image if k not in known]
    problems = [p for p in (column_name_problem(k) for k in extra_names) if p]
    if problems:
        return "; ".join(dict.fromkeys(problems))
    forged = [k for k in extra_names if k in refused]
    if forged:
        return (f"column(s) {', '.join(repr(k) for k in forged)} are not in the source table in PostgreSQL (forged, "
                "or dropped since): not added to silver; if PostgreSQL has them now, replay these records from "
                "quarantine")
    extra = None
    if extra_names:
        extra = json_text({k: (image[k] if isinstance(image[k], str) or image[k] is None
                                else json_text(image[k])) for k in extra_names})
    return wires, op, pos, source_ts, extra, extra_names


def _bad_value(name: str, type_name: str, exc: BadWireValue) -> str:
    text, why = exc.args
    return f"column {name!r}: cannot convert '{clip(str(text))}' to {type_name}" + (f" ({why})" if why else "")


def _key_value(key: bytes | None, name: str, convert: tuple[Callable[[Any], Any], bool]) -> Any:
    """Column ``name`` from the Kafka key (``{...}``, or ``{"schema": ..., "payload": {...}}``), None if absent."""
    if key is None:
        return None
    try:
        doc = _loads(key)
        v = (doc["payload"] if "payload" in doc or "schema" in doc else doc)[name]
        return None if v is None else convert[0](v)
    except Exception:  # noqa: BLE001 - a key that does not parse or convert just does not stand in
        return None


def changes_table(changes: Sequence[Change], silver: pa.Schema) -> pa.Table:
    """Changes -> Arrow rows of the silver table (its schema, in its column order), ``_op`` included."""
    rows = row_schema(silver)
    data: dict[str, list[Any]] = {f.name: [c.values[i] for c in changes] for i, f in enumerate(rows)}
    data["_op"] = [c.op for c in changes]
    for j, name in enumerate(POSITION_COLUMNS):
        data[name] = [c.pos[j] for c in changes]
    data["_source_ts"] = [c.source_ts for c in changes]
    data["_extra"] = [c.extra for c in changes]
    arrays = []
    for f in silver:
        values = data[f.name]
        if pa.types.is_timestamp(f.type):
            arrays.append(pa.array(values, pa.int64()).cast(f.type))
        elif pa.types.is_date32(f.type):
            arrays.append(pa.array(values, pa.int32()).cast(f.type))
        else:
            arrays.append(pa.array(values, f.type))
    return pa.Table.from_arrays(arrays, schema=silver)


#: Columns :func:`parse_batches` adds after the silver table's: the record's Kafka coordinates (the order of
#: changes with equal positions, and where a reject came from), the names of payload columns silver lacks,
#: and for a reject the reason and the raw record (its silver columns are then null).
PARSE_COLUMNS = ("_topic", "_partition", "_offset", "_kafka_timestamp", "_extra_names", "_error", "_key", "_value")

#: Column names the lake uses beside a table's own (compared case-insensitively, as Spark resolves names): the
#: parse's (``PARSE_COLUMNS``), silver's metadata, the MERGE source's helpers (``spark_jobs.silver.cdc``
#: ``newest_changes``: ``_n``, ``_count``, ``_deleted_at``, ``_fill_<column>``), the wide parse's ``_t<i>_<j>``,
#: Delta's change data feed, file metadata and row tracking columns, and anything starting ``__`` (Delta's
#: ``__delta_internal_*``, Debezium's ``__debezium*``). A source column with such a name would clash with them
#: in every batch, so its records go to quarantine instead of widening silver.
RESERVED_NAMES = frozenset(n.lower() for n in (
    *PARSE_COLUMNS, *SILVER_METADATA_COLUMNS, "_n", "_count", "_deleted_at", "_change_type", "_commit_version",
    "_commit_timestamp", "_metadata", "_row_id", "_row_commit_version"))
_RESERVED_PATTERN = re.compile(r"__|_fill_|_t\d+_\d+$", re.IGNORECASE)


def reserved_name(name: str) -> bool:
    """Whether ``name`` is one the lake uses for its own columns (:data:`RESERVED_NAMES`)."""
    return name.lower() in RESERVED_NAMES or _RESERVED_PATTERN.match(name) is not None


def column_name_problem(name: str) -> str | None:
    """Why a payload column ``name`` the table lacks cannot become a silver column, or None if it can."""
    if not name:
        return "an empty column name: not a PostgreSQL column"
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        return f"column name {clip(ascii(name))} is not valid Unicode (a lone surrogate): not a PostgreSQL column"
    if size > PG_MAX_NAME_BYTES:
        return (f"column name {clip(repr(name))} is {size} bytes; PostgreSQL names have at most {PG_MAX_NAME_BYTES}: "
                "not a PostgreSQL column")
    if reserved_name(name):
        return (f"column name {name!r} is reserved for the lake's own columns (the parse's _topic, _offset, _error, "
                "_key, _value..., silver's _op, _commit_lsn, _extra..., Delta's _change_type, _metadata..., __*): "
                "rename the column in PostgreSQL, then replay these records from quarantine")
    if DELTA_INVALID_NAME_CHARS.intersection(name):
        return (f"column name {name!r} contains characters Delta tables refuse without column mapping or in a MERGE "
                "with the change data feed (space, backtick or any of ,;{}()=, tab, newline): rename the column in "
                "PostgreSQL, then replay these records from quarantine")
    return None


def parse_output_schema(silver: StructType) -> StructType:
    """The Spark schema of :func:`parse_batches`' rows: ``silver`` (the table's columns, nullable) +
    ``PARSE_COLUMNS``."""
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    # Every column nullable, the silver key too (NOT NULL there): a reject row has no row image.
    return StructType([*[StructField(f.name, f.dataType, True) for f in silver.fields],
                       StructField("_topic", StringType()), StructField("_partition", IntegerType()),
                       StructField("_offset", LongType()), StructField("_kafka_timestamp", TimestampType()),
                       StructField("_extra_names", ArrayType(StringType())), StructField("_error", StringType()),
                       StructField("_key", BinaryType()), StructField("_value", BinaryType())])


def parse_batches(batches: Iterator[pa.RecordBatch], silver: pa.Schema, out: pa.Schema,
                  keys: Sequence[str], refused: Collection[str] = ()) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body: raw Kafka records (key, value, topic, partition, offset, kafka_timestamp) -> rows of
    ``out`` (the Arrow form of :func:`parse_output_schema`), changes then rejects; tombstones are dropped.

    ``silver`` is the table's Arrow schema (row image + metadata columns); ``refused``: see :func:`parse_records`.
    A change whose values Arrow cannot store after all (what the parse's checks did not foresee) becomes a reject
    naming the column, so no record fails the task.
    """
    rows = row_schema(silver)
    for batch in batches:
        if batch.num_rows == 0:
            continue
        raw = pa.Table.from_batches([batch])
        parsed = parse_records(raw, rows, keys, refused)
        parts = []
        if parsed.changes:
            try:
                parts.append(_change_rows(parsed.changes, silver, out))
            except Exception:  # noqa: BLE001 - find the changes that cannot be stored, quarantine them, keep the rest
                good: list[Change] = []
                for c in parsed.changes:
                    problem = _store_problem(c, silver, out)
                    if problem is None:
                        good.append(c)
                    else:
                        parsed.rejects.append(_reject_of(raw, c.index, problem))
                if good:
                    parts.append(_change_rows(good, silver, out))
        if parsed.rejects:
            parts.append(_reject_rows(parsed.rejects, silver, out))
        for part in parts:
            yield from part.to_batches()


def _change_rows(ch: Sequence[Change], silver: pa.Schema, out: pa.Schema) -> pa.Table:
    """Changes -> rows of ``out`` (:func:`changes_table`, then the parse columns)."""
    table = changes_table(ch, silver)
    n = len(ch)
    extra = [list(json.loads(c.extra)) if c.extra else None for c in ch]
    coords = {"_topic": pa.nulls(n, pa.string()), "_partition": pa.array([c.partition for c in ch], pa.int32()),
              "_offset": pa.array([c.offset for c in ch], pa.int64()),
              "_kafka_timestamp": pa.nulls(n, out.field("_kafka_timestamp").type),
              "_extra_names": pa.array(extra, pa.list_(pa.string())), "_error": pa.nulls(n, pa.string()),
              "_key": pa.nulls(n, pa.binary()), "_value": pa.nulls(n, pa.binary())}
    return pa.Table.from_arrays([*table.columns, *(coords[c] for c in PARSE_COLUMNS)], schema=out)


def _reject_rows(rj: Sequence[Reject], silver: pa.Schema, out: pa.Schema) -> pa.Table:
    """Rejects -> rows of ``out``: silver columns null, the raw record, its coordinates and reason."""
    n = len(rj)
    arrays = [pa.nulls(n, f.type) for f in silver]
    ts_type = out.field("_kafka_timestamp").type
    coords = {"_topic": pa.array([r.topic for r in rj], pa.string()),
              "_partition": pa.array([r.partition for r in rj], pa.int32()),
              "_offset": pa.array([r.offset for r in rj], pa.int64()),
              "_kafka_timestamp": pa.array([r.kafka_timestamp for r in rj], ts_type),
              "_extra_names": pa.nulls(n, pa.list_(pa.string())),
              "_error": pa.array([r.error for r in rj], pa.string()),
              "_key": pa.array([r.key for r in rj], pa.binary()),
              "_value": pa.array([r.value for r in rj], pa.binary())}
    return pa.Table.from_arrays([*arrays, *(coords[c] for c in PARSE_COLUMNS)], schema=out)


def _store_problem(change: Change, silver: pa.Schema, out: pa.Schema) -> str | None:
    """Why one change's row cannot be built (the column named), or None if it can."""
    try:
        _change_rows([change], silver, out)
    except Exception as whole:  # noqa: BLE001 - narrowed to a column below
        for i, f in enumerate(row_schema(silver)):
            try:
                changes_table([Change([v if j == i else None for j, v in enumerate(change.values)], change.op,
                                      change.pos, change.partition, change.offset, None, None)], silver)
            except Exception as exc:  # noqa: BLE001
                return storable_text(f"column {f.name!r}: its value cannot be stored as {sql_type_name(f.type)} "
                                     f"({type(exc).__name__}: {clip(str(exc), 200)})")
        return storable_text(f"the change cannot be stored in silver ({type(whole).__name__}: {clip(str(whole), 200)};"
                             " _extra or metadata columns)")
    return None


def _reject_of(raw: pa.Table, index: int, error: str) -> Reject:
    """The :class:`Reject` of row ``index`` of the parsed input."""
    r = raw.slice(index, 1).to_pylist()[0]
    return Reject(r["key"], r["value"], r["topic"], r["partition"], r["offset"], r["kafka_timestamp"], error)


def wide_column(table_index: int, field_index: int) -> str:
    """Name of silver column ``field_index`` of table ``table_index`` in :func:`parse_tables_batches`' rows."""
    return f"_t{table_index}_{field_index}"


def wide_output_schema(silvers: Sequence[StructType]) -> StructType:
    """The Spark schema of :func:`parse_tables_batches`' rows: every table's silver columns side by side (renamed
    :func:`wide_column`, nullable), then ``PARSE_COLUMNS``."""
    from pyspark.sql.types import StructField, StructType

    tail = parse_output_schema(StructType([])).fields
    return StructType([*[StructField(wide_column(i, j), f.dataType, True)
                         for i, silver in enumerate(silvers) for j, f in enumerate(silver.fields)], *tail])


def parse_tables_batches(batches: Iterator[pa.RecordBatch], tables: Mapping[str, tuple[int, pa.Schema, pa.Schema,
                         Sequence[str]]], out: pa.Schema, unknown_topic: Callable[[str], str],
                         refused: Mapping[str, Collection[str]] | None = None) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body over the records of every CDC topic at once: one Python pass per Arrow batch.

    ``tables``: topic -> (its index, its silver Arrow schema, its :func:`parse_output_schema` Arrow schema, its
    keys). Each topic's rows are parsed by :func:`parse_batches` with its own schema, then placed in ``out`` (the
    Arrow form of :func:`wide_output_schema`) under :func:`wide_column` names, ``_topic`` set on every row. A
    record of a topic no table has becomes a reject whose reason is ``unknown_topic(topic)``. ``refused``: per
    topic, the payload column names the driver will not add (:func:`parse_records`).
    """
    import pyarrow.compute as pc

    width = len(out) - len(PARSE_COLUMNS)
    for batch in batches:
        if batch.num_rows == 0:
            continue
        topics = batch.column("topic")
        for topic in pc.unique(topics).to_pylist():
            rows = batch.filter(pc.equal(topics, topic)) if topic is not None else batch.filter(pc.is_null(topics))
            spec = tables.get(topic) if topic is not None else None
            if spec is None:
                n = rows.num_rows
                wide = [pa.nulls(n, out.field(i).type) for i in range(width)]
                coords = [rows.column("topic"), rows.column("partition").cast(pa.int32()),
                          rows.column("offset").cast(pa.int64()),
                          rows.column("kafka_timestamp").cast(out.field("_kafka_timestamp").type),
                          pa.nulls(n, pa.list_(pa.string())),
                          pa.array([unknown_topic(str(topic))] * n, pa.string()),
                          rows.column("key").cast(pa.binary()), rows.column("value").cast(pa.binary())]
                yield pa.RecordBatch.from_arrays([*wide, *coords], schema=out)
                continue
            index, silver, table_out, keys = spec
            first = next(i for i, f in enumerate(out) if f.name == wide_column(index, 0)) if len(silver) else 0
            for part in parse_batches(iter([rows]), silver, table_out, keys, (refused or {}).get(topic, ())):
                n = part.num_rows
                own = part.columns[:len(silver)]
                tail = list(part.columns[len(silver):])
                tail[0] = pa.array([topic] * n, pa.string())  # _topic: parse_batches leaves it null on changes
                wide = [pa.nulls(n, out.field(i).type) for i in range(width)]
                wide[first:first + len(silver)] = own
                yield pa.RecordBatch.from_arrays([*wide, *tail], schema=out)
