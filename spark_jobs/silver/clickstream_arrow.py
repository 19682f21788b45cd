"""Clickstream records -> checked rows on Arrow: the contract check run in Spark's Python workers.

:func:`spark_jobs.silver.clickstream.check_events` runs :func:`check_records` on
the executors (``mapInArrow``), batch by batch:

* The parse is the strict JSON parse of :func:`spark_jobs.contracts.clickstream.parse_record`
  (or orjson's, where :func:`fast_doc` shows it is the same).
* :class:`ContractCheck` validates the parsed object with jsonschema-rs (a
  maintained validator, built once per worker from the contract's JSON Schema,
  the draft its ``$schema`` declares), plus the contract's rules JSON Schema
  cannot say, in plain Python: an "integer" is a signed 64-bit int, never an
  integer-valued float such as ``42.0`` or ``1e2``; ``event_time`` is a real
  instant (no 2026-02-30, no 23:59:60) at most ``MAX_FUTURE_SECONDS`` after the
  Kafka timestamp. A reject gets the reason code of
  :func:`spark_jobs.contracts.clickstream.check_record` (the slow reference the
  parity tests compare with): the library's errors mapped to our codes, the most
  severe first. A record the library cannot take (a lone UTF-16 surrogate it has
  to read, nesting past its recursion limit) and the envelope's rejects (no
  value, oversized, not JSON, not an object) are classified by ``check_record``.
* The typed columns of a valid record are those of ``silver.events``.

Strings Arrow cannot hold (lone UTF-16 surrogates such as ``"\\ud800"``, valid
JSON) are stored with ``?`` in their place, as Spark does.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from decimal import Decimal
from functools import cache
from typing import TYPE_CHECKING, Any

import jsonschema_rs
import orjson

from spark_jobs.arrow_to_python import py_values
from spark_jobs.contracts.clickstream import (
    EVENT_TIME_RE,
    INT64_MAX,
    INT64_MIN,
    INVALID_VALUE,
    MAX_EVENT_BYTES,
    MAX_FUTURE_SECONDS,
    MISSING_FIELD,
    PROPERTY_COLUMNS,
    REASONS,
    WRONG_TYPE,
    check_record,
    load_schema,
    parse_event_time,
    parse_record,
)
from spark_jobs.contracts.events_rules import field_rules
from spark_jobs.hot.windows import epoch_micros, from_epoch_micros

if TYPE_CHECKING:
    import pyarrow as pa

#: Input columns (the Kafka source's, ``timestamp`` renamed): what :func:`check_records` reads.
RAW_COLUMNS = ("key", "value", "topic", "partition", "offset", "kafka_timestamp")

_MICROS_PER_DAY = 86_400_000_000
_FUTURE_MICROS = MAX_FUTURE_SECONDS * 1_000_000


_MISSING = object()


class EventTimes:
    """``event_time`` text -> epoch microseconds, as ``epoch_micros(parse_event_time(text))``, None when it is
    not a real instant. The whole seconds are cached per ``YYYY-MM-DDTHH:MM:SS`` (a stream's events share
    them), so most events cost one regex match and no ``datetime``."""

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self._seconds: dict[str, int | None] = {}

    def micros(self, text: str) -> int | None:
        m = EVENT_TIME_RE.fullmatch(text)
        if m is None:
            return None
        head = text[:19]
        seconds = self._seconds.get(head, _MISSING)
        if seconds is _MISSING:
            when = parse_event_time(head + "Z")
            seconds = None if when is None else epoch_micros(when) // 1_000_000
            if len(self._seconds) >= self.size:
                self._seconds.clear()
            self._seconds[head] = seconds
        if seconds is None:
            return None
        frac = m.group(7)
        return seconds * 1_000_000 + (int(frac.ljust(6, "0")) if frac else 0)  # type: ignore[operator]


Reject = tuple[str, str]
#: One error found: (rank of its reason in REASONS, detail). Sorted, the first is the one ``check_record`` reports.
_Found = tuple[int, str]
_RANK = {reason: rank for rank, reason in enumerate(REASONS)}


def _path(parts: Sequence[Any]) -> str:
    return ".".join(str(p) for p in parts) or "(record)"


def _at(root: Any, path: Sequence[Any]) -> Any:
    """The value at ``path`` (keys and indexes) inside ``root``, ``_MISSING`` where there is none."""
    for part in path:
        try:
            root = root[part]
        except (KeyError, IndexError, TypeError):
            return _MISSING
    return root


def _not_int64(v: Any) -> bool:
    """True for what JSON Schema may take as an integer but our contract does not: an integer-valued float
    (``42.0``, ``1e2``) or an int beyond signed 64 bits."""
    return type(v) is float or (type(v) is int and not INT64_MIN <= v <= INT64_MAX)


class ContractCheck:
    """The clickstream contract as the stream checks it: jsonschema-rs on the parsed record, plus our rules.

    :meth:`event_micros` is the accept path (the event time, or None when the
    record is not a valid event); :meth:`reject` gives the reason code and
    detail of one it did not accept, the codes and the choice of error of
    ``check_record``. ``doc`` is always the result of ``parse_record`` (no
    duplicate keys, no NaN, exact integers), or of :func:`fast_doc` where that is
    the same. Build it once per process: :func:`contract_check`.
    """

    def __init__(self, schema: Mapping[str, Any] | None = None) -> None:
        schema = dict(schema) if schema is not None else load_schema()
        # field_rules raises ContractError on a construct it does not know, so the integer rule cannot miss a field
        # and no format but uuid (the one the reference checks) is in the schema.
        rules = field_rules(schema)
        self._schema = schema
        # The draft the schema's $schema declares; the schema is checked against its meta-schema; no network.
        validator = jsonschema_rs.validator_for(schema, validate_formats=True, offline=True)
        self._is_valid = validator.is_valid
        self._iter_errors = validator.iter_errors
        self._int_fields = tuple(r.name for r in rules.fields if r.json_type == "integer")
        self._int_props = {etype: names for etype, props in rules.by_event_type.items()
                           if (names := tuple(r.name for r in props if r.json_type == "integer"))}
        self._micros = EventTimes().micros

    def event_micros(self, doc: Any, kafka_us: int) -> int | None:
        """The event time in epoch microseconds when ``doc`` is a valid event with Kafka timestamp ``kafka_us``
        (epoch microseconds), else None (also when the library cannot read it: :meth:`reject` then asks
        ``check_record``)."""
        if type(doc) is not dict:
            return None
        try:
            if not self._is_valid(doc):
                return None
        except ValueError:  # a lone surrogate the library has to read, nesting past its recursion limit
            return None
        get = doc.get
        for name in self._int_fields:
            if _not_int64(get(name)):
                return None
        etype = get("event_type")
        if type(etype) is str and etype in self._int_props:
            props = get("properties")
            if type(props) is dict:
                for name in self._int_props[etype]:
                    if _not_int64(props.get(name)):
                        return None
        text = get("event_time")
        if type(text) is not str:
            return None
        micros = self._micros(text)
        if micros is None or micros > kafka_us + _FUTURE_MICROS:
            return None
        return micros

    def reject(self, value: bytes | None, doc: Any, kafka_us: int) -> Reject | None:
        """``(reason, detail)`` of a record :meth:`event_micros` did not accept; ``doc`` is its parse (anything but
        a dict for a value that is no JSON object). The envelope's rejects (no value, oversized, not JSON, not an
        object), and a record the library cannot read, get ``check_record``'s verdict: None if valid after all."""
        if type(doc) is dict:
            try:
                found = self.errors(doc, kafka_us)
            except ValueError:  # the library cannot read it (see event_micros): the reference decides
                found = []
            if found:
                return found[0]
        return check_record(value, from_epoch_micros(kafka_us))

    def errors(self, doc: dict[str, Any], kafka_us: int) -> list[Reject]:
        """``(reason, detail)`` for every rule ``doc`` (a parsed JSON object) breaks, the most severe first: what
        ``check_record`` finds, in its order (reason code, then detail) and its words. Raises ValueError where the
        library does."""
        found: list[_Found] = []
        for error in self._iter_errors(doc):
            found.extend(self._describe(error, doc))
        found.extend(self._our_rules(doc, kafka_us, found))
        found.sort()
        return [(REASONS[rank], detail) for rank, detail in found]

    def _describe(self, error: jsonschema_rs.ValidationError, doc: Any) -> Iterator[_Found]:
        """One library error -> our reason code (``required`` -> missing_field, ``type`` -> wrong_type, any other
        keyword -> invalid_value) and a detail naming the field, worded as ``check_record``'s (Python jsonschema's
        messages for the keywords the contract uses; the library's own for any other)."""
        kind, kinds = error.kind, jsonschema_rs.ValidationErrorKind
        where = list(error.instance_path)
        if isinstance(kind, kinds.Required):
            yield _RANK[MISSING_FIELD], f"{_path([*where, kind.property])}: required field is missing"
            return
        if isinstance(kind, kinds.AdditionalProperties):
            for name in kind.unexpected:
                yield (_RANK[INVALID_VALUE],
                       f"{_path([*where, name])}: unexpected field (the contract allows no other fields)")
            return
        field = _path(where)
        value = _at(doc, where)
        if value is _MISSING:
            value = error.instance
        node = _at(self._schema, error.schema_path[:-1])
        node = node if isinstance(node, dict) else {}
        if isinstance(kind, kinds.Type):
            got = "null" if value is None else type(value).__name__
            expected = node.get("type", "/".join(kind.types))
            yield _RANK[WRONG_TYPE], f"{field}: expected {expected}, got {got} {json.dumps(value)[:80]}"
            return
        if isinstance(kind, kinds.Pattern):
            what = node.get("description") or f"pattern {kind.pattern}"
            yield _RANK[INVALID_VALUE], f"{field}: {json.dumps(value)[:80]} is not valid: {what}"
            return
        keyword = kind.name
        if keyword == "enum":
            message = f"{value!r} is not one of {node.get('enum')!r}"
        elif keyword == "const":
            message = f"{node.get('const')!r} was expected"
        elif keyword == "minimum":
            message = f"{value!r} is less than the minimum of {node.get('minimum')!r}"
        elif keyword == "maximum":
            message = f"{value!r} is greater than the maximum of {node.get('maximum')!r}"
        elif keyword == "minLength":
            message = f"{value!r} {'should be non-empty' if node.get('minLength') == 1 else 'is too short'}"
        elif keyword == "maxLength":
            message = f"{value!r} {'is expected to be empty' if node.get('maxLength') == 0 else 'is too long'}"
        elif keyword == "format":
            message = f"{value!r} is not a {node.get('format')!r}"
        else:
            message = error.message
        yield _RANK[INVALID_VALUE], f"{field}: {message[:200]}"

    def _our_rules(self, doc: dict[str, Any], kafka_us: int, found: Sequence[_Found]) -> list[_Found]:
        """The contract's rules JSON Schema cannot say, broken by ``doc`` (``found``: the library's errors)."""
        out: list[_Found] = []

        def strict_int(obj: dict[str, Any], name: str, field: str) -> None:
            v = obj.get(name)
            if _not_int64(v):
                out.append((_RANK[WRONG_TYPE], f"{field}: expected integer, got {type(v).__name__} {json.dumps(v)[:80]}"))

        for name in self._int_fields:
            strict_int(doc, name, name)
        etype, props = doc.get("event_type"), doc.get("properties")
        if type(etype) is str and type(props) is dict:
            for name in self._int_props.get(etype, ()):
                strict_int(props, name, f"properties.{name}")
        text = doc.get("event_time")
        if type(text) is str and not any(detail.startswith("event_time:") for _rank, detail in found):
            micros = self._micros(text)
            if micros is None:
                out.append((_RANK[INVALID_VALUE], f"event_time: {text!r} is not a real date and time"))
            elif micros > kafka_us + _FUTURE_MICROS:
                received = from_epoch_micros(kafka_us).isoformat()
                out.append((_RANK[INVALID_VALUE], f"event_time: {text} is more than {MAX_FUTURE_SECONDS} s after the "
                                                  f"record's time {received} (clock skew?)"))
        return out


@cache
def contract_check() -> ContractCheck:
    """This process's :class:`ContractCheck` (one validator per Python worker, built on first use)."""
    return ContractCheck()


#: More ``{``/``[`` bytes than this and :func:`fast_doc` leaves the record to the strict parser (nesting depth).
_FAST_MAX_CONTAINERS = 32


def fast_doc(value: bytes) -> Any:
    """orjson's parse of ``value`` when it is certainly what :func:`parse_record` returns, else None.

    The strict parser rejects duplicate keys, which orjson silently merges, and
    numbers it reads differently (integers beyond 64 bits become floats in
    orjson). Both change the text: the parse is taken only when ``value`` is
    exactly orjson's compact serialisation of the parsed document (what
    ``json.dumps(separators=(",", ":"), ensure_ascii=False)`` and JavaScript's
    ``JSON.stringify`` write, so every record of our producer). Anything else,
    including a deeply nested value, goes to the strict parser: this only ever
    saves time, never changes a verdict.
    """
    if value.count(b"{") + value.count(b"[") > _FAST_MAX_CONTAINERS:
        return None
    try:
        doc = orjson.loads(value)
        return doc if orjson.dumps(doc) == value else None
    except (orjson.JSONDecodeError, orjson.JSONEncodeError):
        return None


def properties_text(props: Any) -> str:
    """The ``properties`` column: the object as compact JSON with sorted keys (what Spark's ``to_json`` of the
    parsed variant gives for the contract's strings and integers)."""
    if all(type(v) is str or type(v) is int for v in props.values()):
        try:  # same text as json.dumps below for strings and 64-bit integers, faster
            return orjson.dumps(props, option=orjson.OPT_SORT_KEYS).decode()
        except orjson.JSONEncodeError:  # an integer beyond 64 bits, a lone surrogate
            pass
    return json.dumps(props, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _string_array(values: list[Any]) -> pa.Array:
    import pyarrow as pa

    try:
        return pa.array(values, pa.string())
    except (UnicodeEncodeError, pa.ArrowException):
        # Lone surrogates: Spark stores '?' for each; do the same (only this column pays for it).
        return pa.array([None if v is None else v.encode("utf-8", "replace").decode("utf-8") for v in values],
                        pa.string())


def check_records(raw: pa.Table, contract: ContractCheck | None = None) -> pa.Table:
    """Raw records (``RAW_COLUMNS``; ``kafka_timestamp`` as timestamp[us, UTC]) -> the same rows with the
    parse results appended.

    Appended columns (as the Spark ``check_events``): ``_reason`` (NULL when
    valid, else a reason code of ``spark_jobs.contracts.clickstream.REASONS``),
    ``_error`` (the detail naming the field), and for valid rows ``_event_id``,
    ``_event_type``, ``_user_id`` int64, ``_session_id``, ``_event_time``
    timestamp[us, UTC], ``_event_date`` date32 (its UTC date), ``_properties``
    (JSON text, sorted keys), ``_p_<name>`` for every typed property of the
    event's own type (NULL for other types), ``_schema_version`` int32.
    Grain: one row per input row, in input order. ``contract``: the check
    (default: this process's :func:`contract_check`).
    """
    import pyarrow as pa

    contract = contract or contract_check()
    values = py_values(raw.column("value"))
    kafka_us = py_values(raw.column("kafka_timestamp").cast(pa.int64()))
    n = len(values)
    reason: list[str | None] = [None] * n
    error: list[str | None] = [None] * n
    event_id: list[str | None] = [None] * n
    event_type: list[str | None] = [None] * n
    user_id: list[int | None] = [None] * n
    session_id: list[str | None] = [None] * n
    event_us: list[int | None] = [None] * n
    event_day: list[int | None] = [None] * n
    properties: list[str | None] = [None] * n
    schema_version: list[int | None] = [None] * n
    props_out: dict[str, list[Any]] = {name: [None] * n for name, _t, _o in PROPERTY_COLUMNS}
    owned: dict[str, list[tuple[str, str]]] = {}
    for name, spark_type, owner in PROPERTY_COLUMNS:
        owned.setdefault(owner, []).append((name, spark_type))

    for i in range(n):
        value = values[i]
        ts = kafka_us[i]
        doc: Any = None
        if value is not None and len(value) <= MAX_EVENT_BYTES:
            doc = fast_doc(value)
            if doc is None:
                try:
                    doc = parse_record(value)
                except ValueError:  # JSONDecodeError, UnicodeDecodeError, too deep/long: reject() says which
                    doc = None
        micros = contract.event_micros(doc, ts)
        if micros is None:
            verdict = contract.reject(value, doc, ts)
            if verdict is not None:
                reason[i], error[i] = verdict
                continue
            doc = parse_record(value)  # valid (check_record's word on a record the library cannot read): it parses
            micros = epoch_micros(parse_event_time(doc["event_time"]))  # type: ignore[arg-type]  # valid: an instant
        etype = doc["event_type"]
        event_id[i] = doc["event_id"]
        event_type[i] = etype
        user_id[i] = doc["user_id"]
        session_id[i] = doc["session_id"]
        event_us[i] = micros
        event_day[i] = micros // _MICROS_PER_DAY
        props = doc["properties"]
        properties[i] = properties_text(props)
        for name, spark_type in owned.get(etype, ()):
            v = props.get(name)
            props_out[name][i] = Decimal(v) if spark_type.startswith("decimal") and v is not None else v
        schema_version[i] = doc["schema_version"]

    money = pa.decimal128(18, 2)
    arrow_types = {"string": pa.string(), "bigint": pa.int64(), "int": pa.int32(), "decimal(18,2)": money}
    columns: dict[str, pa.Array] = {
        "_reason": pa.array(reason, pa.string()),
        "_error": _string_array(error),
        "_event_id": pa.array(event_id, pa.string()),
        "_event_type": pa.array(event_type, pa.string()),
        "_user_id": pa.array(user_id, pa.int64()),
        "_session_id": _string_array(session_id),
        "_event_time": pa.array(event_us, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
        "_event_date": pa.array(event_day, pa.int32()).cast(pa.date32()),
        "_properties": _string_array(properties),
    }
    for name, spark_type, _owner in PROPERTY_COLUMNS:
        arrow_type = arrow_types[spark_type]
        vals = props_out[name]
        columns[f"_p_{name}"] = _string_array(vals) if arrow_type == pa.string() else pa.array(vals, arrow_type)
    columns["_schema_version"] = pa.array(schema_version, pa.int32())
    out = raw.select(list(RAW_COLUMNS))
    for name, array in columns.items():
        out = out.append_column(name, array)
    return out
