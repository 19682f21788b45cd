"""The clickstream event contract (topic ``events.clickstream``): schema, validation, reason codes, compatibility.

The JSON Schema (draft 2020-12) in ``events/clickstream.schema.json`` is the
single source of truth. The producer (:mod:`spark_jobs.events_producer`)
validates with it before sending; the streaming app classifies with
:func:`check_record`, behind the compiled fast checks of
:mod:`spark_jobs.silver.events_arrow`; :mod:`spark_jobs.silver.events` applies
the same rules as Spark SQL expressions (``lake reconcile events``), reading
patterns, enums and limits from :func:`field_rules` so they cannot drift apart;
parity tests run them over the same corpus.

A record is checked in this order and gets exactly one reason code, the first
that applies, plus a detail naming the field:

1. ``oversized``     the value is longer than ``MAX_EVENT_BYTES``;
2. ``not_json``      no value, not UTF-8, not a single JSON object (trailing
   content, duplicate keys, ``NaN``, numbers longer than 1000 characters and
   nesting deeper than Python's recursion limit count as not JSON);
3. ``missing_field`` a required field is absent (top level, or a property the
   event type requires);
4. ``wrong_type``    a field has the wrong JSON type; ``null`` is a type, so
   ``"user_id": null`` is ``wrong_type``. "integer" means a JSON number without
   fraction or exponent that fits a signed 64-bit integer (``1.0`` and
   ``2**63`` are not integers);
5. ``invalid_value`` everything else: enum, const, pattern, length, range, an
   unexpected top-level field, a timestamp that is not a real instant, or an
   ``event_time`` more than ``MAX_FUTURE_SECONDS`` after the record's Kafka
   timestamp.

Released schema versions are kept in ``events/released/``; the unit tests run
:func:`breaking_changes` of each of them against the current schema, so a change
that would break readers of already-written data fails CI.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cache
from importlib import resources
from typing import Any

TOPIC = "events.clickstream"
SCHEMA_VERSION = 1
EVENT_TYPES = ("page_view", "add_to_cart", "checkout", "purchase")
MAX_EVENT_BYTES = 65536
MAX_FUTURE_SECONDS = 300
#: Longest JSON number (characters) a record may hold: Jackson's default limit in Spark's JSON parser.
MAX_NUMBER_CHARS = 1000
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

OVERSIZED = "oversized"
NOT_JSON = "not_json"
MISSING_FIELD = "missing_field"
WRONG_TYPE = "wrong_type"
INVALID_VALUE = "invalid_value"
#: Reason codes in the order they are checked (a record gets the first that applies).
REASONS = (OVERSIZED, NOT_JSON, MISSING_FIELD, WRONG_TYPE, INVALID_VALUE)

SCHEMA_FILE = "clickstream.schema.json"
RELEASED_DIR = "released"

#: The contract's ``event_time`` text (RFC 3339, UTC, 0-6 fractional digits); groups: its fields.
EVENT_TIME_RE = re.compile(
    r"([12][0-9]{3})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]{1,6}))?Z")


class ContractError(ValueError):
    """The schema file is not something this module (or the Spark transform) can apply."""


# --------------------------------------------------------------------------- schema files


def _events_dir() -> Any:
    return resources.files("spark_jobs.contracts").joinpath("events")


@cache
def _load_schema_text() -> str:
    return str(_events_dir().joinpath(SCHEMA_FILE).read_text(encoding="utf-8"))


def load_schema() -> dict[str, Any]:
    """The current clickstream schema (a fresh copy; callers may modify it)."""
    schema: dict[str, Any] = json.loads(_load_schema_text())
    return schema


def released_schemas() -> dict[str, dict[str, Any]]:
    """Every released schema version, by file name (``clickstream.v1.schema.json`` ...)."""
    folder = _events_dir().joinpath(RELEASED_DIR)
    return {f.name: json.loads(f.read_text(encoding="utf-8"))
            for f in sorted(folder.iterdir(), key=lambda f: f.name) if f.name.endswith(".json")}


# --------------------------------------------------------------------------- validation


def _strict_integer(_checker: Any, value: Any) -> bool:
    return type(value) is int and INT64_MIN <= value <= INT64_MAX


@cache
def _validator() -> Any:
    from jsonschema import Draft202012Validator, FormatChecker, validators

    type_checker = Draft202012Validator.TYPE_CHECKER.redefine("integer", _strict_integer)
    strict = validators.extend(Draft202012Validator, type_checker=type_checker)
    schema = load_schema()
    strict.check_schema(schema)
    return strict(schema, format_checker=FormatChecker(["uuid"]))


def _path(parts: Sequence[Any]) -> str:
    return ".".join(str(p) for p in parts) or "(record)"


def _reason_of(validator: str) -> str:
    if validator == "required":
        return MISSING_FIELD
    if validator == "type":
        return WRONG_TYPE
    return INVALID_VALUE


def _describe(error: Any) -> Iterator[tuple[str, str]]:
    """One jsonschema error -> ``(reason, "field: problem")`` pairs (``required`` may name several fields)."""
    path = list(error.absolute_path)
    if error.validator == "required":
        present = error.instance if isinstance(error.instance, dict) else {}
        for name in error.validator_value:
            if name not in present:
                yield MISSING_FIELD, f"{_path([*path, name])}: required field is missing"
        return
    if error.validator == "additionalProperties":
        allowed = set(error.schema.get("properties", {}))
        extra = sorted(k for k in error.instance if k not in allowed)
        for name in extra:
            yield INVALID_VALUE, f"{_path([*path, name])}: unexpected field (the contract allows no other fields)"
        return
    if error.validator == "type":
        got = "null" if error.instance is None else type(error.instance).__name__
        shown = json.dumps(error.instance)[:80]
        yield WRONG_TYPE, f"{_path(path)}: expected {error.validator_value}, got {got} {shown}"
        return
    if error.validator == "pattern":
        what = error.schema.get("description") or f"pattern {error.validator_value}"
        yield INVALID_VALUE, f"{_path(path)}: {json.dumps(error.instance)[:80]} is not valid: {what}"
        return
    yield _reason_of(str(error.validator)), f"{_path(path)}: {error.message[:200]}"


def parse_event_time(text: str) -> datetime | None:
    """An RFC 3339 UTC ``event_time`` (``...Z``, 0-6 fractional digits) -> aware UTC datetime, None if not a real instant."""
    m = EVENT_TIME_RE.fullmatch(text)
    if m is None:
        return None
    year, month, day, hour, minute, second, frac = m.groups()
    try:
        return datetime(int(year), int(month), int(day), int(hour), int(minute), int(second),
                        int((frac or "0").ljust(6, "0")), tzinfo=UTC)
    except ValueError:
        return None


def format_event_time(when: datetime) -> str:
    """Aware datetime -> the contract's ``event_time`` text in UTC with millisecond precision (``...05:00:00.123Z``)."""
    if when.tzinfo is None:
        raise ValueError(f"event_time {when!r} has no time zone: pass an aware datetime (UTC)")
    utc = when.astimezone(UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"


def event_errors(doc: Any, received_at: datetime | None = None) -> list[tuple[str, str]]:
    """``(reason, detail)`` for every rule ``doc`` (a parsed JSON value) breaks, most severe reason first.

    ``received_at`` (the Kafka timestamp, or now for a producer) enables the
    future-time rule; without it ``event_time`` is only checked to be a real instant.
    """
    found: list[tuple[str, str]] = []
    for error in _validator().iter_errors(doc):
        found.extend(_describe(error))
    if isinstance(doc, dict) and isinstance(doc.get("event_time"), str):
        text = doc["event_time"]
        if not any(d.startswith("event_time:") for _, d in found):
            when = parse_event_time(text)
            if when is None:
                found.append((INVALID_VALUE, f"event_time: {text!r} is not a real date and time"))
            elif received_at is not None:
                limit = _as_utc(received_at) + timedelta(seconds=MAX_FUTURE_SECONDS)
                if when > limit:
                    found.append((INVALID_VALUE, f"event_time: {text} is more than {MAX_FUTURE_SECONDS} s after the "
                                                 f"record's time {_as_utc(received_at).isoformat()} (clock skew?)"))
    found.sort(key=lambda rd: (REASONS.index(rd[0]), rd[1]))
    return found


def _as_utc(when: datetime) -> datetime:
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)


class _NotJson(ValueError):
    pass


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise _NotJson(f"duplicate key {k!r}")
        out[k] = v
    return out


def _reject_constant(name: str) -> Any:
    raise _NotJson(f"{name} is not JSON")


def _number(convert: Any) -> Any:
    def parse(text: str) -> Any:
        if len(text) > MAX_NUMBER_CHARS:
            raise _NotJson(f"number longer than {MAX_NUMBER_CHARS} characters")
        return convert(text)
    return parse


_parse_int = _number(int)
_parse_float = _number(float)


#: One decoder for every record (``json.loads`` with hooks builds a new one per call).
_STRICT_DECODER = json.JSONDecoder(object_pairs_hook=_no_duplicate_keys, parse_constant=_reject_constant,
                                   parse_int=_parse_int, parse_float=_parse_float)


def parse_record(value: bytes) -> Any:
    """Strict JSON parse of a record value (UTF-8, one value, no duplicate keys, no NaN); raises ValueError."""
    text = value.decode("utf-8")
    try:
        return _STRICT_DECODER.decode(text)
    except RecursionError:
        raise _NotJson("nested too deeply") from None


def check_record(value: bytes | None, kafka_timestamp: datetime) -> tuple[str, str] | None:
    """Classify one Kafka record value as the streaming app does: None if valid, else ``(reason, detail)``."""
    if value is None:
        return NOT_JSON, "record has no value (tombstone)"
    if len(value) > MAX_EVENT_BYTES:
        return OVERSIZED, f"value is {len(value)} bytes, more than the {MAX_EVENT_BYTES} allowed"
    try:
        doc = parse_record(value)
    except UnicodeDecodeError as exc:
        return NOT_JSON, f"value is not UTF-8 ({exc.reason} at byte {exc.start})"
    except ValueError as exc:  # JSONDecodeError, _NotJson, int digits limit
        return NOT_JSON, f"value is not JSON: {exc}"
    if not isinstance(doc, dict):
        return NOT_JSON, f"value is JSON but not an object (got {type(doc).__name__})"
    errors = event_errors(doc, kafka_timestamp)
    return errors[0] if errors else None


# --------------------------------------------------------------------------- rules for Spark


@dataclass(frozen=True)
class FieldRule:
    """One field of the contract as the Spark transform checks it (``path`` is relative to its object)."""

    name: str
    json_type: str  # "string" | "integer" | "object"
    required: bool = True
    pattern: str | None = None
    enum: tuple[str, ...] | None = None
    const: Any = None
    minimum: int | None = None
    maximum: int | None = None
    min_length: int | None = None
    max_length: int | None = None


@dataclass(frozen=True)
class ContractRules:
    """The schema flattened into what :mod:`spark_jobs.silver.events` applies."""

    fields: tuple[FieldRule, ...]
    additional_fields: bool
    by_event_type: Mapping[str, tuple[FieldRule, ...]]


_RULE_KEYWORDS = {"type", "pattern", "enum", "const", "minimum", "maximum", "minLength", "maxLength", "format",
                  "description", "title", "$comment"}


def _resolve(schema: Mapping[str, Any], node: Mapping[str, Any]) -> Mapping[str, Any]:
    ref = node.get("$ref")
    if ref is None:
        return node
    if not str(ref).startswith("#/"):
        raise ContractError(f"$ref {ref!r}: only local references are supported")
    target: Any = schema
    for part in str(ref)[2:].split("/"):
        target = target[part]
    extra = {k: v for k, v in node.items() if k != "$ref"}
    return {**_resolve(schema, target), **extra}


def _rule(schema: Mapping[str, Any], name: str, node: Mapping[str, Any], required: bool, where: str) -> FieldRule:
    node = _resolve(schema, node)
    unknown = set(node) - _RULE_KEYWORDS
    if unknown:
        raise ContractError(f"{where}.{name}: keyword(s) {sorted(unknown)} are not applied by the Spark transform")
    json_type = node.get("type")
    if json_type not in ("string", "integer", "object"):
        raise ContractError(f"{where}.{name}: type {json_type!r} is not supported (string, integer or object)")
    if node.get("format") not in (None, "uuid"):
        raise ContractError(f"{where}.{name}: format {node['format']!r} is not applied by the Spark transform")
    return FieldRule(
        name=name, json_type=json_type, required=required, pattern=node.get("pattern"),
        enum=tuple(node["enum"]) if "enum" in node else None, const=node.get("const"),
        minimum=node.get("minimum"), maximum=node.get("maximum"),
        min_length=node.get("minLength"), max_length=node.get("maxLength"))


def field_rules(schema: Mapping[str, Any] | None = None) -> ContractRules:
    """Flatten the clickstream schema (top-level fields, per-event-type properties) for the Spark transform.

    Raises :class:`ContractError` for any construct the transform does not
    apply, so a schema change that Spark would silently ignore fails loudly.
    """
    schema = schema if schema is not None else load_schema()
    required = set(schema.get("required", []))
    fields = tuple(_rule(schema, n, node, n in required, "(record)") for n, node in schema["properties"].items())
    by_type: dict[str, tuple[FieldRule, ...]] = {}
    for i, block in enumerate(schema.get("allOf", [])):
        try:
            event_type = block["if"]["properties"]["event_type"]["const"]
            props = block["then"]["properties"]["properties"]
        except (KeyError, TypeError):
            raise ContractError(f"allOf[{i}]: expected if event_type const X then properties rules") from None
        unknown = set(props) - {"required", "properties"}
        if unknown or set(block) - {"if", "then"}:
            raise ContractError(f"allOf[{i}]: only 'required' and 'properties' rules are applied, got {sorted(unknown)}")
        req = set(props.get("required", []))
        rules = [_rule(schema, n, node, n in req, f"properties[{event_type}]")
                 for n, node in props.get("properties", {}).items()]
        rules += [FieldRule(n, "any") for n in sorted(req - set(props.get("properties", {})))]
        by_type[event_type] = tuple(rules)
    return ContractRules(fields, schema.get("additionalProperties", True) is not False, by_type)


# --------------------------------------------------------------------------- compatibility

#: Keywords that never change which documents are valid.
_ANNOTATIONS = {"description", "title", "$comment", "examples", "default", "deprecated", "$id", "$schema",
                "readOnly", "writeOnly"}
#: Keywords :func:`breaking_changes` understands; any other keyword that differs is reported as breaking.
_UNDERSTOOD = {"type", "properties", "required", "additionalProperties", "enum", "const", "pattern", "format",
               "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength",
               "minItems", "maxItems", "items", "allOf", "if", "then", "$defs", "$ref"}


def breaking_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """Why data valid under ``old`` could be rejected by (or read differently under) ``new``; empty = compatible.

    Backward compatibility for readers of already-written data: every document
    ``old`` accepts must stay acceptable to ``new``. Checked, at every object
    level (top level, ``$ref`` targets, the per-event-type ``then`` blocks):

    * a field (property) removed, where the object does not allow unknown fields;
    * a field added with constraints where the old object allowed any value
      under that name (old data may hold it with another type);
    * a new required field;
    * a type narrowed (``number`` -> ``integer`` narrows; ``integer`` -> ``number`` widens);
    * an enum value removed, an enum or ``const`` added, a ``const`` changed;
    * ``additionalProperties`` made stricter (allowed -> false);
    * a ``pattern`` or ``format`` added or changed (regex containment is not
      decided: any change counts, loosening one included);
    * ``minimum``/``exclusiveMinimum``/``minLength``/``minItems`` raised or
      added, the ``max`` counterparts lowered or added;
    * an ``allOf`` rule added whose condition old data can meet (a rule for a
      new event type is fine), or a ``then`` block tightened (recursively).

    Not checked (reported as breaking when they differ, since they cannot be
    proven safe): any other keyword (``oneOf``, ``anyOf``, ``not``,
    ``multipleOf``, ``dependentRequired``, ``else``, ...) and non-local ``$ref``.
    Not covered at all: semantic changes that keep the schema text (a field that
    changes meaning), and the rules outside the schema (size limit, future-time limit).
    """
    problems: list[str] = []
    _compare(old, new, old, new, "(record)", problems)
    return problems


def _types(node: Mapping[str, Any]) -> set[str] | None:
    t = node.get("type")
    if t is None:
        return None
    return {t} if isinstance(t, str) else set(t)


def _bound_changed(old: Any, new: Any, *, lower: bool) -> bool:
    if new is None:
        return False
    if old is None:
        return True
    return bool(new > old) if lower else bool(new < old)


def _compare(old: Mapping[str, Any], new: Mapping[str, Any], old_root: Mapping[str, Any],
             new_root: Mapping[str, Any], where: str, out: list[str]) -> None:
    old = _resolve(old_root, old)
    new = _resolve(new_root, new)
    keys = (set(old) | set(new)) - _ANNOTATIONS
    for k in sorted(keys - _UNDERSTOOD):
        if old.get(k) != new.get(k):
            out.append(f"{where}: keyword {k!r} changed ({old.get(k)!r} -> {new.get(k)!r}); "
                       "this checker cannot prove it compatible")

    old_t, new_t = _types(old), _types(new)
    if new_t is not None:
        widened = set(new_t) | ({"integer"} if "number" in new_t else set())
        if old_t is None:
            out.append(f"{where}: type {sorted(new_t)} added where any type was allowed")
        elif not old_t <= widened:
            out.append(f"{where}: type changed from {sorted(old_t)} to {sorted(new_t)}")

    if "enum" in new:
        if "enum" not in old:
            out.append(f"{where}: enum {new['enum']} added")
        else:
            removed = [v for v in old["enum"] if v not in new["enum"]]
            if removed:
                out.append(f"{where}: enum value(s) {removed} removed")
    if "const" in new and ("const" not in old or old["const"] != new["const"]):
        out.append(f"{where}: const {old.get('const')!r} -> {new['const']!r}")
    for k in ("pattern", "format"):
        if k in new and old.get(k) != new[k]:
            out.append(f"{where}: {k} {old.get(k)!r} -> {new[k]!r}")
    for k in ("minimum", "exclusiveMinimum", "minLength", "minItems"):
        if _bound_changed(old.get(k), new.get(k), lower=True):
            out.append(f"{where}: {k} raised {old.get(k)!r} -> {new[k]!r}")
    for k in ("maximum", "exclusiveMaximum", "maxLength", "maxItems"):
        if _bound_changed(old.get(k), new.get(k), lower=False):
            out.append(f"{where}: {k} lowered {old.get(k)!r} -> {new[k]!r}")

    old_closed = old.get("additionalProperties", True) is False
    if new.get("additionalProperties", True) is False and not old_closed:
        out.append(f"{where}: additionalProperties became false (old data may carry other fields)")
    elif isinstance(old.get("additionalProperties"), dict) and isinstance(new.get("additionalProperties"), dict):
        _compare(old["additionalProperties"], new["additionalProperties"], old_root, new_root,
                 f"{where}.<additional>", out)

    new_required = sorted(set(new.get("required", [])) - set(old.get("required", [])))
    for name in new_required:
        out.append(f"{_join(where, name)}: new required field (old producers do not send it)")

    old_props: Mapping[str, Any] = old.get("properties", {})
    new_props: Mapping[str, Any] = new.get("properties", {})
    new_closed = new.get("additionalProperties", True) is False
    for name, old_node in old_props.items():
        if name not in new_props:
            if new_closed:
                out.append(f"{_join(where, name)}: field removed (the object allows no unknown fields)")
            elif _constrains(new.get("additionalProperties")):
                out.append(f"{_join(where, name)}: field removed; unknown fields must now match additionalProperties")
            else:
                out.append(f"{_join(where, name)}: field removed (readers of old data lose it)")
        else:
            _compare(old_node, new_props[name], old_root, new_root, _join(where, name), out)
    for name in new_props:
        if name not in old_props and not old_closed and _constrains(new_props[name]):
            out.append(f"{_join(where, name)}: new field with constraints where old data may hold any value "
                       "under that name")

    if "items" in old and "items" in new:
        _compare(old["items"], new["items"], old_root, new_root, f"{where}[]", out)
    elif "items" in new:
        out.append(f"{where}: items constraint added")

    _compare_conditionals(old, new, old_root, new_root, where, out)


def _constrains(node: Any) -> bool:
    if node is None or node is True:
        return False
    if node is False:
        return True
    return bool(set(node) - _ANNOTATIONS)


def _join(where: str, name: str) -> str:
    return name if where == "(record)" else f"{where}.{name}"


def _condition_value(block: Mapping[str, Any]) -> tuple[str, Any] | None:
    """``if: {properties: {F: {const: V}}}`` -> ``(F, V)``."""
    props = block.get("if", {}).get("properties", {})
    if len(props) == 1:
        (name, node), = props.items()
        if isinstance(node, dict) and "const" in node:
            return name, node["const"]
    return None


def _compare_conditionals(old: Mapping[str, Any], new: Mapping[str, Any], old_root: Mapping[str, Any],
                          new_root: Mapping[str, Any], where: str, out: list[str]) -> None:
    def key(block: Mapping[str, Any]) -> str:
        return json.dumps(block.get("if"), sort_keys=True)

    old_blocks = {key(b): b for b in old.get("allOf", [])}
    for block in new.get("allOf", []):
        cond = _condition_value(block)
        label = f"{where}: allOf rule if {json.dumps(block.get('if'), sort_keys=True)}"
        if set(block) - {"if", "then"}:
            if old_blocks.get(key(block)) != block:
                out.append(f"{label}: has keywords other than if/then; this checker cannot prove it compatible")
            continue
        previous = old_blocks.get(key(block))
        if previous is not None:
            _compare(previous.get("then", {}), block.get("then", {}), old_root, new_root,
                     f"{where}[if {cond[0]}={cond[1]!r}]" if cond else label, out)
            continue
        if cond is not None:
            name, value = cond
            old_field = _resolve(old_root, old.get("properties", {}).get(name, {}))
            allowed = old_field.get("enum", [old_field["const"]] if "const" in old_field else None)
            if allowed is not None and value not in allowed:
                continue  # old data cannot meet the condition (e.g. a new event type)
        out.append(f"{label}: new rule that old data can meet")
