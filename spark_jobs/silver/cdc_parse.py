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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson
import pyarrow as pa

from spark_jobs.silver.cdc import (
    POSITION_COLUMNS,
    ROW_OPS,
    SILVER_METADATA_COLUMNS,
    SNAPSHOT_RANK,
    STREAM_RANK,
)
from spark_jobs.silver.cdc_convert import BadWireValue, WireMismatch, converter, json_text, sql_type_name

if TYPE_CHECKING:
    from collections.abc import Iterator

    from pyspark.sql.types import StructType

__all__ = [
    "PARSE_COLUMNS", "Change", "Parsed", "Reject", "parse_batches", "parse_output_schema", "parse_records",
    "row_schema", "sql_type_name",
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


def parse_records(raw: pa.Table, rows: pa.Schema, keys: Sequence[str]) -> Parsed:
    """Parse one table's raw Kafka records (columns key, value, topic, partition, offset, kafka_timestamp).

    ``rows`` is the row image schema (:func:`row_schema` of the silver table),
    ``keys`` its primary key. Tombstones (null value, sent after each delete
    for log compaction) are skipped and counted: records = changes + rejects +
    tombstones. A primary-key update arrives as a delete of the old key and a
    create of the new one: two ordinary changes. Rejected: records that are not
    JSON objects, lack a payload or op, have an op that is not a row change
    (unknown, or truncate), lack a row image or a key column (the Kafka key
    stands in for a key missing from the image), do not fit the table's
    types, or carry no source position.
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
    schema_text = ("row image does not match the table schema ("
                   + ", ".join(f"{f.name} {sql_type_name(f.type)}" for f in rows) + ")")
    fallible = [(i, f.name, sql_type_name(f.type)) for i, f in enumerate(rows) if convert[i][1]]

    out = Parsed([], [], 0, [])
    extra_seen: dict[str, None] = {}
    columns = raw.to_pydict()
    for key, value, topic, partition, offset, kafka_ts in zip(
            columns["key"], columns["value"], columns["topic"], columns["partition"], columns["offset"],
            columns["kafka_timestamp"], strict=True):
        if value is None:
            out.tombstones += 1
            continue
        try:
            result = _change(key, value, names, convert, key_index, known, schema_text, fallible)
        except RecursionError:  # the stdlib parse or a JSON re-serialisation of a deeply nested value
            result = TOO_DEEP
        if isinstance(result, str):
            out.rejects.append(Reject(key, value, topic, partition, offset, kafka_ts, result))
            continue
        wires, op, pos, ts_ms, extra, extra_names = result
        if extra_names:
            extra_seen.update(dict.fromkeys(extra_names))
        out.changes.append(Change(wires, op, pos, partition, offset, ts_ms * 1000 if type(ts_ms) is int else None,
                                  extra))
    out.extra_columns = list(extra_seen)
    return out


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
            key_index: list[int], known: set[str], schema_text: str,
            fallible: list[tuple[int, str, str]]) -> str | tuple[list[Any], str, Position, Any, str | None, list[str]]:
    """One record -> the reject reason, or (typed values, op, position, ts_ms, extra, extra names)."""
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
        return f"unknown op '{op}' (expected one of c, u, d, r)"
    after = payload.get("after")
    if op != "d" and after is None:
        return f"op '{op}' has no 'after' row image"
    image = payload.get("before") if op == "d" else after
    if image is not None and not isinstance(image, dict):
        return schema_text
    image = image or {}
    # Wire type check first (a mismatch rejects the whole image), value conversion after the key check.
    wires = [image.get(name) for name in names]
    try:
        for i, (fn, is_fallible) in enumerate(convert):
            if wires[i] is not None and not is_fallible:
                wires[i] = fn(wires[i])
    except WireMismatch:
        return schema_text
    for i in key_index:
        if wires[i] is None:
            wires[i] = _key_value(key, names[i], convert[i])
    absent = [names[i] for i in key_index if wires[i] is None]
    if absent:
        return f"missing key column(s) {', '.join(absent)} in the row image and the Kafka key"
    source = payload.get("source")
    source = source if isinstance(source, dict) else {}
    pos = _position(op, source)
    if pos is None:
        return NO_POSITION
    bad: list[str] = []
    for i, name, type_name in fallible:
        if wires[i] is not None:
            try:
                wires[i] = convert[i][0](wires[i])
            except BadWireValue as exc:
                bad.append(f"column {name!r}: cannot convert '{exc.args[0]}' to {type_name}")
    if bad:
        return "; ".join(bad)
    extra_names = [k for k in image if k not in known]
    unsupported = [k for k in extra_names if DELTA_INVALID_NAME_CHARS.intersection(k)]
    if unsupported:
        return (f"column name(s) {', '.join(repr(k) for k in unsupported)} contain characters Delta tables refuse "
                f"without column mapping or in a MERGE with the change data feed (space, backtick or any of "
                f",;{{}}()=, tab, newline): rename the column in PostgreSQL, "
                f"then replay these records from quarantine")
    extra = None
    if extra_names:
        extra = json_text({k: (image[k] if isinstance(image[k], str) or image[k] is None
                                else json_text(image[k])) for k in extra_names})
    return wires, op, pos, source.get("ts_ms"), extra, extra_names


def _key_value(key: bytes | None, name: str, convert: tuple[Callable[[Any], Any], bool]) -> Any:
    """Column ``name`` from the Kafka key (``{...}``, or ``{"schema": ..., "payload": {...}}``), None if absent."""
    if key is None:
        return None
    try:
        doc = _loads(key)
        v = (doc["payload"] if "payload" in doc or "schema" in doc else doc)[name]
        return None if v is None else convert[0](v)
    except (ValueError, TypeError, KeyError, UnicodeDecodeError, WireMismatch, BadWireValue):
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
                  keys: Sequence[str]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body: raw Kafka records (key, value, topic, partition, offset, kafka_timestamp) -> rows of
    ``out`` (the Arrow form of :func:`parse_output_schema`), changes then rejects; tombstones are dropped.

    ``silver`` is the table's Arrow schema (row image + metadata columns).
    """
    rows = row_schema(silver)
    for batch in batches:
        if batch.num_rows == 0:
            continue
        parsed = parse_records(pa.Table.from_batches([batch]), rows, keys)
        parts = []
        if parsed.changes:
            ch = parsed.changes
            table = changes_table(ch, silver)
            n = len(ch)
            extra = [list(json.loads(c.extra)) if c.extra else None for c in ch]
            coords = {"_topic": pa.nulls(n, pa.string()), "_partition": pa.array([c.partition for c in ch], pa.int32()),
                      "_offset": pa.array([c.offset for c in ch], pa.int64()),
                      "_kafka_timestamp": pa.nulls(n, out.field("_kafka_timestamp").type),
                      "_extra_names": pa.array(extra, pa.list_(pa.string())), "_error": pa.nulls(n, pa.string()),
                      "_key": pa.nulls(n, pa.binary()), "_value": pa.nulls(n, pa.binary())}
            parts.append(pa.Table.from_arrays([*table.columns, *(coords[c] for c in PARSE_COLUMNS)], schema=out))
        if parsed.rejects:
            rj = parsed.rejects
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
            parts.append(pa.Table.from_arrays([*arrays, *(coords[c] for c in PARSE_COLUMNS)], schema=out))
        for part in parts:
            yield from part.to_batches()


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
                         Sequence[str]]], out: pa.Schema, unknown_topic: Callable[[str], str]
                         ) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body over the records of every CDC topic at once: one Python pass per Arrow batch.

    ``tables``: topic -> (its index, its silver Arrow schema, its :func:`parse_output_schema` Arrow schema, its
    keys). Each topic's rows are parsed by :func:`parse_batches` with its own schema, then placed in ``out`` (the
    Arrow form of :func:`wide_output_schema`) under :func:`wide_column` names, ``_topic`` set on every row. A
    record of a topic no table has becomes a reject whose reason is ``unknown_topic(topic)``.
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
            for part in parse_batches(iter([rows]), silver, table_out, keys):
                n = part.num_rows
                own = part.columns[:len(silver)]
                tail = list(part.columns[len(silver):])
                tail[0] = pa.array([topic] * n, pa.string())  # _topic: parse_batches leaves it null on changes
                wide = [pa.nulls(n, out.field(i).type) for i in range(width)]
                wide[first:first + len(silver)] = own
                yield pa.RecordBatch.from_arrays([*wide, *tail], schema=out)
