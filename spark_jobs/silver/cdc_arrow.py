"""CDC apply in the driver: Debezium records (Arrow) -> typed changes -> newest per key -> silver (merge-on-read).

The streaming app's CDC hot path (``spark_jobs.streaming.cdc``). It keeps the
rules of :mod:`spark_jobs.silver.cdc` (read its module docstring: the source
position, snapshot rank, TOAST placeholder, added columns) and its MERGE
fragments (:func:`~spark_jobs.silver.cdc.merge_plan`) without a Spark job:

* :func:`parse_records`: one pass of Python over the batch's raw records
  (orjson, one ``loads`` of each Debezium envelope) gives, per record, a
  :class:`Change` (typed row image, op, position) or a :class:`Reject` with the
  reason. Types come from the silver table's
  Arrow schema, so a widened table types its new columns on the next parse.
* :func:`newest_changes`: per key, the TOAST placeholder is filled from an
  earlier change of the same batch, the newest change by position is kept, and
  a change not newer than the key's recorded delete (:class:`DeleteIndex`) is
  dropped.
* :func:`append_changes`: appends those newest changes to
  ``silver.<t>__changes`` (merge-on-read, see :mod:`spark_jobs.silver.cdc`),
  committed with the Delta transaction ``<app_id>:<table>`` = batch id, so a
  replayed batch is written once; then the delete markers.
* :func:`compact` (:func:`compaction_source` + :func:`merge_changes`): in the
  background, the newest pending change per key across batches is MERGEd into
  ``silver.<t>__base`` with delta-rs (DataFusion, in the driver), with the Spark
  plan's conditions in DataFusion's quoting, position-guarded, so a change
  merged twice is a no-op.

Why: on two cores a Spark MERGE of one table cost 2-37 s per batch (job
scheduling, a join and a rewrite per batch, four tables at once), and the
Spark parse of the JSON envelopes (``from_json``, which this module replaced;
a parity test compared both on one corpus before the switch) another 13 s per
32,000 records. A delta-rs MERGE per batch came next, but delta-rs cannot
write deletion vectors, so each MERGE rewrote every file holding a changed row:
with random updates that is the whole table each batch (290 MB of silver per
~1 s batch in ``lake bench cdc``), a cost growing with the table. An append
costs what the batch holds; the MERGE runs once per compaction.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any

import orjson
import pyarrow as pa

from spark_jobs.hot.events import epoch_micros
from spark_jobs.silver.cdc import (
    BATCH_COLUMN,
    POSITION_COLUMNS,
    ROW_OPS,
    SILVER_METADATA_COLUMNS,
    SNAPSHOT_RANK,
    STREAM_RANK,
    UNAVAILABLE_VALUE,
    merge_plan,
)

if TYPE_CHECKING:
    from deltalake import DeltaTable

    from spark_jobs.driver_delta import DriverTable

__all__ = [
    "Applied", "Change", "DeleteIndex", "Parsed", "Reject", "append_changes", "base_schema_of", "compact",
    "compaction_source", "merge_changes", "newest_changes", "parse_records", "quarantine_table", "row_schema",
    "sql_type_name", "toastable_of",
]

Position = tuple[int, int, int]

NOT_JSON = "value is not a JSON object (not UTF-8 JSON, truncated, or not written by the JsonConverter)"
NO_PAYLOAD = "envelope has 'schema' but no 'payload': expected Debezium JsonConverter output"
NO_OP = "payload has no 'op'"
#: A record nested deeper than the parsers go (orjson stops at 1,024 levels, the stdlib's recursion limit
#: near 1,000): rejected like any unreadable record instead of failing the batch on every replay.
TOO_DEEP = "value is nested too deeply to parse (more than ~1,000 levels of objects/arrays)"
#: Characters Delta refuses in a column name unless the table uses column mapping.
DELTA_INVALID_NAME_CHARS = frozenset(" ,;{}()\n\t=")
TRUNCATE = "op 't' (truncate) removes every row and has no key: truncate the silver table by hand or re-snapshot"
NO_POSITION = "source has neither 'sequence' nor 'lsn': the change cannot be ordered"

_INT_RANGES = {pa.int8(): 2**7, pa.int16(): 2**15, pa.int32(): 2**31, pa.int64(): 2**63}


class _Mismatch(Exception):
    """A wire value of the wrong JSON type for its column (the row image does not fit the table)."""


class _BadValue(Exception):
    """A wire value of the right JSON type that does not convert (``12,50`` for a decimal)."""


def sql_type_name(dt: pa.DataType) -> str:
    """Spark SQL's name of the type a silver column of Arrow type ``dt`` has (used in reject reasons)."""
    names = {pa.int8(): "tinyint", pa.int16(): "smallint", pa.int32(): "int", pa.int64(): "bigint",
             pa.bool_(): "boolean", pa.float32(): "float", pa.float64(): "double", pa.string(): "string",
             pa.large_string(): "string", pa.binary(): "binary", pa.large_binary(): "binary", pa.date32(): "date"}
    if dt in names:
        return names[dt]
    if pa.types.is_decimal(dt):
        return f"decimal({dt.precision},{dt.scale})"
    if pa.types.is_timestamp(dt):
        return "timestamp" if dt.tz else "timestamp_ntz"
    return str(dt)


def _json_text(v: Any) -> str:
    return json.dumps(v, separators=(",", ":"), ensure_ascii=False)


def _converter(field: pa.Field) -> tuple[Callable[[Any], Any], bool]:
    """(wire JSON value -> Arrow-ready Python value, fallible) for a silver column.

    Raises ``_Mismatch`` for a JSON type the column cannot take (the row image
    does not fit the table), ``_BadValue`` for a text that does not convert.
    Wire formats of the connector's settings (``connectors/``):
    ``decimal.handling.mode=string`` (NUMERIC as its exact text),
    ``time.precision.mode=adaptive`` (date = days since the epoch, timestamptz =
    ISO-8601 text), ``binary.handling.mode=base64``; JSON/JSONB as JSON text.
    A string column takes any JSON value (non-strings as their JSON text), as
    Spark's ``from_json`` does.
    """
    dt = field.type
    if pa.types.is_string(dt) or pa.types.is_large_string(dt):
        # A string column reads any JSON value; non-strings keep their JSON text (as Spark's from_json does).
        return (lambda v: v if isinstance(v, str) else _json_text(v)), False
    if dt in _INT_RANGES:
        bound = _INT_RANGES[dt]

        def integer(v: Any) -> int:
            if type(v) is not int or not -bound <= v < bound:
                raise _Mismatch
            return v
        return integer, False
    if pa.types.is_boolean(dt):
        def boolean(v: Any) -> bool:
            if type(v) is not bool:
                raise _Mismatch
            return v
        return boolean, False
    if pa.types.is_floating(dt):
        def floating(v: Any) -> float:
            if type(v) not in (int, float):
                raise _Mismatch
            return float(v)
        return floating, False
    if pa.types.is_date32(dt):
        def days(v: Any) -> int:
            if type(v) is not int or not -(2**31) <= v < 2**31:
                raise _Mismatch
            return v
        return days, False
    if pa.types.is_decimal(dt):
        exponent = Decimal(1).scaleb(-dt.scale)
        limit = Decimal(10) ** (dt.precision - dt.scale)

        def decimal(v: Any) -> Decimal:
            text = v if isinstance(v, str) else _json_text(v)
            try:
                value = Decimal(text.strip()).quantize(exponent, rounding=ROUND_HALF_UP)
            except (InvalidOperation, ValueError) as exc:
                raise _BadValue(text) from exc
            if not value.is_finite() or abs(value) >= limit:
                raise _BadValue(text)
            return value
        return decimal, True
    if pa.types.is_timestamp(dt) and dt.tz is not None:
        def timestamp(v: Any) -> int:
            text = v if isinstance(v, str) else _json_text(v)
            try:
                value = datetime.fromisoformat(text.strip())
            except ValueError as exc:
                raise _BadValue(text) from exc
            return epoch_micros(value if value.tzinfo else value.replace(tzinfo=UTC))
        return timestamp, True
    if pa.types.is_binary(dt) or pa.types.is_large_binary(dt):
        def binary(v: Any) -> bytes:
            text = v if isinstance(v, str) else _json_text(v)
            try:
                return base64.b64decode(text, validate=True)
            except (binascii.Error, ValueError) as exc:
                raise _BadValue(text) from exc
        return binary, True
    raise ValueError(
        f"column {field.name!r}: silver type {dt} is not supported by the CDC parse; supported are integers, "
        "boolean, float/double, string, decimal, date, timestamp (with time zone) and binary")


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
    """The row image part of a silver table's Arrow schema (its columns minus the metadata and batch id)."""
    return pa.schema([f for f in silver if f.name not in SILVER_METADATA_COLUMNS and f.name != BATCH_COLUMN])


def toastable_of(silver: pa.Schema, keys: Sequence[str]) -> list[str]:
    """TOAST-able columns of a silver (base or changes) Arrow schema: its non-key string row columns."""
    from spark_jobs.silver.cdc import toastable_columns_of

    return toastable_columns_of([(f.name, pa.types.is_string(f.type)) for f in row_schema(silver)], keys)


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
    convert = [_converter(f) for f in rows]
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
    """Parse JSON; orjson (~3x faster on Debezium's schema-carrying envelopes), ``json`` for what it refuses.

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
    op = op if isinstance(op, str) else _json_text(op)
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
    except _Mismatch:
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
            except _BadValue as exc:
                bad.append(f"column {name!r}: cannot convert '{exc.args[0]}' to {type_name}")
    if bad:
        return "; ".join(bad)
    extra_names = [k for k in image if k not in known]
    unsupported = [k for k in extra_names if DELTA_INVALID_NAME_CHARS.intersection(k)]
    if unsupported:
        return (f"column name(s) {', '.join(repr(k) for k in unsupported)} contain characters Delta tables refuse "
                f"without column mapping (space or any of ,;{{}}()=, tab, newline): rename the column in PostgreSQL, "
                f"then replay these records from quarantine")
    extra = None
    if extra_names:
        extra = _json_text({k: (image[k] if isinstance(image[k], str) or image[k] is None
                                else _json_text(image[k])) for k in extra_names})
    return wires, op, pos, source.get("ts_ms"), extra, extra_names


def _key_value(key: bytes | None, name: str, convert: tuple[Callable[[Any], Any], bool]) -> Any:
    """Column ``name`` from the Kafka key (``{...}``, or ``{"schema": ..., "payload": {...}}``), None if absent."""
    if key is None:
        return None
    try:
        doc = _loads(key)
        v = (doc["payload"] if "payload" in doc or "schema" in doc else doc)[name]
        return None if v is None else convert[0](v)
    except (ValueError, TypeError, KeyError, UnicodeDecodeError, _Mismatch, _BadValue):
        return None


class DeleteIndex:
    """Per key, the position of its newest applied delete (the ``silver.<table>__deleted`` markers).

    A change not newer than its key's marker is a stale re-send after the delete
    (silver no longer holds the row, so the MERGE's position guard cannot catch it).
    """

    def __init__(self) -> None:
        self._pos: dict[tuple[Any, ...], Position] = {}

    def __len__(self) -> int:
        return len(self._pos)

    def add(self, key: tuple[Any, ...], pos: Position) -> None:
        if key not in self._pos or pos > self._pos[key]:
            self._pos[key] = pos

    def add_table(self, markers: pa.Table, keys: Sequence[str]) -> None:
        """Add marker rows (key columns + position columns) as read from the side table."""
        cols = markers.select([*keys, *POSITION_COLUMNS]).to_pydict()
        for i in range(markers.num_rows):
            self.add(tuple(cols[k][i] for k in keys), tuple(int(cols[c][i]) for c in POSITION_COLUMNS))  # type: ignore[arg-type]

    def supersedes(self, key: tuple[Any, ...], pos: Position) -> bool:
        marker = self._pos.get(key)
        return marker is not None and pos <= marker


def newest_changes(changes: Iterable[Change], rows: pa.Schema, keys: Sequence[str], toastable: Sequence[str],
                   deletes: DeleteIndex) -> list[Change]:
    """The MERGE source: per key, the newest change (by position, then partition and offset).

    A TOAST placeholder in the newest change takes the last real value (NULL
    counts) an earlier change of the same key in this batch carried, so an
    insert then an untouched-column update in one batch keeps the text; with no
    earlier value the placeholder stays and the MERGE keeps the stored value.
    A newest change not newer than the key's delete marker is dropped.
    """
    names = rows.names
    key_index = [names.index(k) for k in keys]
    toast_index = [names.index(c) for c in toastable]
    by_key: dict[tuple[Any, ...], list[Change]] = {}
    for ch in changes:
        by_key.setdefault(tuple(ch.values[i] for i in key_index), []).append(ch)
    out: list[Change] = []
    for key, group in by_key.items():
        group.sort(key=lambda c: (c.pos, c.partition, c.offset))
        newest = group[-1]
        if deletes.supersedes(key, newest.pos):
            continue
        holes = [i for i in toast_index if newest.values[i] == UNAVAILABLE_VALUE]
        if holes and len(group) > 1:
            values = list(newest.values)
            for i in holes:
                for earlier in reversed(group[:-1]):
                    if earlier.values[i] != UNAVAILABLE_VALUE:
                        values[i] = earlier.values[i]
                        break
            newest = Change(values, newest.op, newest.pos, newest.partition, newest.offset, newest.source_ts,
                            newest.extra)
        out.append(newest)
    return out


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


def quote(name: str) -> str:
    """Double-quote an identifier for DataFusion SQL (delta-rs predicates)."""
    return '"' + name.replace('"', '""') + '"'


def merge_changes(table: DeltaTable, source: pa.Table, keys: Sequence[str], toastable: Sequence[str],
                  app_id: str, txn_name: str, batch_id: int) -> dict[str, Any] | None:
    """MERGE ``source`` (:func:`changes_table`) into ``table`` once per batch; None when already committed.

    The statement is :func:`spark_jobs.silver.cdc.merge_plan`'s: delete when the
    change is a delete and newer, update when newer (TOAST placeholders keep the
    stored value), insert unless a delete. Returns delta-rs's merge metrics.
    """
    from deltalake import CommitProperties, Transaction

    txn = f"{app_id}:{txn_name}"
    table.update_incremental()
    done = table.transaction_version(txn)
    if done is not None and int(done) >= batch_id:
        return None
    plan = merge_plan(keys, source.column_names, toastable, quote=quote)
    merger = table.merge(source, plan.condition, source_alias="s", target_alias="t",
                         commit_properties=CommitProperties(app_transactions=[Transaction(txn, batch_id)]))
    result: dict[str, Any] = (merger
                              .when_matched_delete(predicate=plan.delete_condition)
                              .when_matched_update(updates=dict(plan.update_set), predicate=plan.update_condition)
                              .when_not_matched_insert(updates=dict(plan.insert_values),
                                                       predicate=plan.insert_condition)
                              .execute())
    return result


@dataclass
class Applied:
    """What :func:`append_changes` did for one table and batch."""

    changes: int  # newest changes appended (0: nothing to do)
    deletes: int  # delete markers appended
    newest_source_ts: int | None  # epoch micros of the newest PostgreSQL commit among them
    written: bool  # False when the batch was committed before (a replay) or had no change


def base_schema_of(changes: pa.Schema) -> pa.Schema:
    """The base table's columns: the changes table's minus ``BATCH_COLUMN`` (same order)."""
    return pa.schema([f for f in changes if f.name != BATCH_COLUMN])


def append_changes(changes: DriverTable, deleted: DriverTable, index: DeleteIndex, batch: Sequence[Change],
                   keys: Sequence[str], app_id: str, batch_id: int) -> Applied:
    """One table's batch: newest change per key, appended to ``silver.<t>__changes``, then the delete markers.

    Order matters for crash safety: changes first, markers after. A replay after a
    crash between the two skips the append (its transaction is recorded) and
    appends the markers; the other order would let the replay's recorded
    markers hide the batch's own deletes from changes that were never written.
    ``index`` learns the markers once they are committed.
    """
    schema = base_schema_of(changes.arrow_schema)
    rows = row_schema(schema)
    newest = newest_changes(batch, rows, keys, toastable_of(schema, keys), index)
    if not newest:
        return Applied(0, 0, None, False)
    table = changes_table(newest, schema)
    table = table.append_column(BATCH_COLUMN, pa.array([batch_id] * table.num_rows, pa.int64()))
    written = changes.write_once(table, app_id, batch_id, "append")
    markers = markers_table(newest, rows, keys, deleted.arrow_schema)
    if markers.num_rows:
        deleted.write_once(markers, app_id, batch_id, "append")
        index.add_table(markers, keys)
    stamps = [c.source_ts for c in newest if c.source_ts is not None]
    return Applied(len(newest), markers.num_rows, max(stamps) if stamps else None, written)


def compaction_source(pending: pa.Table, keys: Sequence[str], toastable: Sequence[str]) -> pa.Table:
    """Rows of ``silver.<t>__changes`` -> the MERGE source: the newest change per key across batches.

    Per key, rows are ordered by position, then batch (as the view orders them);
    a TOAST placeholder in the newest row takes the newest earlier value of the
    key that is not the placeholder (NULL counts), as :func:`newest_changes` does
    within a batch. Vectorised (Arrow sort + numpy): a compaction reads tens of
    thousands of rows. ``BATCH_COLUMN`` is dropped.
    """
    import numpy as np
    import pyarrow.compute as pc

    n = pending.num_rows
    if n == 0:
        return pending.drop_columns([BATCH_COLUMN])
    order = [*keys, *POSITION_COLUMNS, BATCH_COLUMN]
    t = pending.take(pc.sort_indices(pending, sort_keys=[(c, "ascending") for c in order]))
    starts = np.zeros(n, dtype=bool)
    starts[0] = True
    for k in keys:
        col = t.column(k)
        starts[1:] |= pc.not_equal(col.slice(1), col.slice(0, n - 1)).to_numpy(zero_copy_only=False)
    group = np.cumsum(starts)
    last = np.append(starts[1:], True)
    rows = np.arange(n)
    for c in toastable:
        col = t.column(c)
        real = ~pc.fill_null(pc.equal(col, UNAVAILABLE_VALUE), False).to_numpy(zero_copy_only=False)
        source = np.maximum.accumulate(np.where(real, rows, -1))  # newest real value at or before each row
        usable = (source >= 0) & (group[np.clip(source, 0, None)] == group)
        t = t.set_column(t.schema.get_field_index(c), c, col.take(pa.array(np.where(usable, source, rows))))
    return t.filter(pa.array(last)).drop_columns([BATCH_COLUMN])


def compact(base: DriverTable, pending: pa.Table, keys: Sequence[str], app_id: str, upto: int) -> dict[str, Any] | None:
    """MERGE the pending changes (batches up to ``upto``) into ``silver.<t>__base``, once per ``upto``.

    The statement is :func:`merge_changes`'s, guarded by position, so changes a
    previous compaction merged already (kept one compaction longer, see
    ``spark_jobs.silver.cdc``) are no-ops. Returns delta-rs's merge metrics, None
    when nothing was pending or ``upto`` was merged before.
    """
    toastable = toastable_of(base.arrow_schema, keys)
    source = compaction_source(pending, keys, toastable)
    if source.num_rows == 0:
        return None
    source = source.select(base.arrow_schema.names).cast(base.arrow_schema)
    return merge_changes(base.table, source, keys, toastable, app_id, base.name, upto)


def markers_table(changes: Sequence[Change], rows: pa.Schema, keys: Sequence[str], markers: pa.Schema) -> pa.Table:
    """Delete markers (key columns + position) of the delete changes, in the side table's schema."""
    names = rows.names
    deletes = [c for c in changes if c.op == "d"]
    data: dict[str, list[Any]] = {k: [c.values[names.index(k)] for c in deletes] for k in keys}
    for j, name in enumerate(POSITION_COLUMNS):
        data[name] = [c.pos[j] for c in deletes]
    return pa.Table.from_arrays([pa.array(data[f.name], f.type) for f in markers], schema=markers)


def quarantine_table(rejects: Sequence[Reject], quarantined_at: datetime, stage: str = "cdc") -> pa.Table:
    """Rejects -> ``quarantine.<stage>`` rows (``streaming.common.quarantine_arrow``)."""
    from spark_jobs.streaming.common import quarantine_arrow

    return quarantine_arrow(stage, {
        "topic": pa.array([r.topic for r in rejects], pa.string()),
        "partition": pa.array([r.partition for r in rejects], pa.int32()),
        "offset": pa.array([r.offset for r in rejects], pa.int64()),
        "kafka_timestamp": pa.array([r.kafka_timestamp for r in rejects], pa.timestamp("us", tz="UTC")),
        "key": pa.array([r.key for r in rejects], pa.binary()),
        "value": pa.array([r.value for r in rejects], pa.binary()),
        "reason": pa.array(["unparseable"] * len(rejects), pa.string()),
        "error": pa.array([r.error for r in rejects], pa.string()),
    }, quarantined_at)
