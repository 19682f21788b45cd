"""Clickstream records -> checked rows on Arrow: the contract as Python, run in Spark's Python workers.

:func:`spark_jobs.silver.clickstream.check_events` runs :func:`check_records` on
the executors (``mapInArrow``), batch by batch:

* :class:`FastCheck` is the contract compiled into one generated Python
  function (types, enums, patterns, lengths, ranges, the event-time rules)
  over the strict JSON parse of :func:`spark_jobs.contracts.clickstream.parse_record`
  (or orjson's, where :func:`fast_doc` shows it is the same). It only ever
  *accepts*; a record it does not accept goes to
  :func:`spark_jobs.contracts.clickstream.check_record` (the JSON Schema validator),
  which gives the reason code and the detail, and also has the last word: the
  valid records are exactly the ones ``check_record`` accepts.
* The typed columns of a valid record are those of ``silver.events``.

Strings Arrow cannot hold (lone UTF-16 surrogates such as ``"\\ud800"``, valid
JSON) are stored with ``?`` in their place, as Spark does.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import orjson

from spark_jobs.arrow_to_python import py_values
from spark_jobs.contracts.clickstream import (
    EVENT_TIME_RE,
    INT64_MAX,
    INT64_MIN,
    MAX_EVENT_BYTES,
    MAX_FUTURE_SECONDS,
    PROPERTY_COLUMNS,
    check_record,
    parse_event_time,
    parse_record,
)
from spark_jobs.contracts.events_rules import ContractRules, FieldRule, field_rules
from spark_jobs.hot.windows import epoch_micros, from_epoch_micros

if TYPE_CHECKING:
    import pyarrow as pa

#: Input columns (the Kafka source's, ``timestamp`` renamed): what :func:`check_records` reads.
RAW_COLUMNS = ("key", "value", "topic", "partition", "offset", "kafka_timestamp")

_MICROS_PER_DAY = 86_400_000_000
_FUTURE_MICROS = MAX_FUTURE_SECONDS * 1_000_000


def _rule_test(rule: FieldRule, v: str, consts: dict[str, Any]) -> str:
    """One field rule -> a Python expression on the variable ``v`` that is True only when every keyword of
    the rule holds (JSON Schema semantics); constants it needs are added to ``consts``."""

    def const(value: Any) -> str:
        name = f"_c{len(consts)}"
        consts[name] = value
        return name

    if rule.json_type == "string":
        terms = [f"type({v}) is str"]
        if rule.enum is not None:
            terms.append(f"{v} in {const(frozenset(rule.enum))}")
        if rule.const is not None:
            terms.append(f"{v} == {const(rule.const)}")
        if rule.min_length is not None or rule.max_length is not None:
            lo = 0 if rule.min_length is None else rule.min_length
            hi = sys.maxsize if rule.max_length is None else rule.max_length
            terms.append(f"{lo} <= len({v}) <= {hi}")
        if rule.pattern is not None:  # not anchored, as JSON Schema
            terms.append(f"{const(re.compile(rule.pattern).search)}({v}) is not None")
        return " and ".join(terms)
    if rule.json_type == "integer":
        minimum = INT64_MIN if rule.minimum is None else max(INT64_MIN, rule.minimum)
        maximum = INT64_MAX if rule.maximum is None else min(INT64_MAX, rule.maximum)
        terms = [f"type({v}) is int", f"{minimum} <= {v} <= {maximum}"]
        if rule.const is not None:
            terms.append(f"{v} == {const(rule.const)}")
        return " and ".join(terms)
    if rule.json_type == "object":
        return f"type({v}) is dict"
    return "True"  # "any": presence is the whole rule


def _field_lines(rules: Sequence[FieldRule], obj: str, fail: str, consts: dict[str, Any]) -> list[str]:
    lines = []
    for rule in rules:
        lines.append(f"    v = {obj}.get({rule.name!r}, _MISSING)")
        test = _rule_test(rule, "v", consts)
        if rule.required:
            lines.append(f"    if v is _MISSING or not ({test}): {fail}")
        else:
            lines.append(f"    if v is not _MISSING and not ({test}): {fail}")
    return lines


def _generate(rules: ContractRules) -> Callable[[Any, int], int | None]:
    """The contract compiled into one Python function ``(doc, kafka_us) -> event micros | None`` (None: not
    accepted): a straight line of tests per field, no loop over rules or keywords."""
    consts: dict[str, Any] = {"_MISSING": _MISSING, "_FUTURE": _FUTURE_MICROS, "_micros": EventTimes().micros}
    lines = ["def event_micros(doc, kafka_us):", "    if type(doc) is not dict: return None"]
    if not rules.additional_fields:
        consts["_allowed"] = frozenset(r.name for r in rules.fields)
        lines.append("    if not _allowed.issuperset(doc): return None")
    lines += _field_lines(rules.fields, "doc", "return None", consts)
    by_type = {}
    for etype, prop_rules in rules.by_event_type.items():
        body = ["def props(p):", "    if type(p) is not dict: return False",
                *_field_lines(prop_rules, "p", "return False", consts), "    return True"]
        scope = dict(consts)
        exec("\n".join(body), scope)  # noqa: S102  (source built above from the contract's rules)
        by_type[etype] = scope["props"]
    consts["_by_type"] = by_type
    lines += ["    props = _by_type.get(doc.get('event_type'))",
              "    if props is not None and not props(doc.get('properties')): return None",
              "    text = doc.get('event_time')",
              "    if type(text) is not str: return None",
              "    micros = _micros(text)",
              "    if micros is None or micros > kafka_us + _FUTURE: return None",
              "    return micros"]
    scope = dict(consts)
    exec("\n".join(lines), scope)  # noqa: S102  (source built above from the contract's rules)
    fn: Callable[[Any, int], int | None] = scope["event_micros"]
    return fn


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


class FastCheck:
    """The contract as plain Python tests: ``accepts(doc, kafka_us)`` is True only for valid events.

    Sound, not complete: anything it does not accept is classified by
    ``check_record``. Requires the document to be the result of
    ``parse_record`` (no duplicate keys, no NaN, exact integers).
    """

    def __init__(self, rules: ContractRules | None = None) -> None:
        #: ``(doc, kafka_us) -> event time in epoch microseconds`` when ``doc`` is accepted, else None.
        self.event_micros = _generate(rules or field_rules())

    def accepts(self, doc: Any, kafka_us: int) -> bool:
        return self.event_micros(doc, kafka_us) is not None


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


def check_records(raw: pa.Table, rules: ContractRules | None = None, fast: FastCheck | None = None) -> pa.Table:
    """Raw records (``RAW_COLUMNS``; ``kafka_timestamp`` as timestamp[us, UTC]) -> the same rows with the
    parse results appended.

    Appended columns (as the Spark ``check_events``): ``_reason`` (NULL when
    valid, else a reason code of ``spark_jobs.contracts.clickstream.REASONS``),
    ``_error`` (the detail naming the field), and for valid rows ``_event_id``,
    ``_event_type``, ``_user_id`` int64, ``_session_id``, ``_event_time``
    timestamp[us, UTC], ``_event_date`` date32 (its UTC date), ``_properties``
    (JSON text, sorted keys), ``_p_<name>`` for every typed property of the
    event's own type (NULL for other types), ``_schema_version`` int32.
    Grain: one row per input row, in input order.
    """
    import pyarrow as pa

    fast = fast or FastCheck(rules)
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
                except ValueError:  # JSONDecodeError, UnicodeDecodeError, too deep/long: check_record says which
                    doc = None
        micros = None if doc is None else fast.event_micros(doc, ts)
        if micros is None:
            verdict = check_record(value, from_epoch_micros(ts))
            if verdict is not None:
                reason[i], error[i] = verdict
                continue
            doc = parse_record(value)  # valid, so a value that parses
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
