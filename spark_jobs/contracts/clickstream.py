"""The clickstream event contract (topic ``events.clickstream``): schema, validation, reason codes, compatibility.

The JSON Schema (draft 2020-12) in ``events/clickstream.schema.json`` is the
single source of truth. The producer (:mod:`spark_jobs.loadgen.producer`)
validates with it before sending; the streaming app classifies with
:class:`spark_jobs.silver.clickstream_arrow.ContractCheck` (jsonschema-rs plus the
rules below JSON Schema cannot say), whose reason codes and choice of error are
those of :func:`check_record` here, the slower reference; parity tests run both
over the same corpus.

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
:func:`spark_jobs.contracts.events_compat.breaking_changes` of each of them
against the current schema, so a change that would break readers of
already-written data fails CI. :mod:`spark_jobs.contracts.events_rules`
flattens the schema into per-field rules.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

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
    """The schema file is not something this module (or the stream's check) can apply."""


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


#: Typed property columns of silver.events' valid frame: (column, Spark type, event type that carries it).
PROPERTY_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("page", "string", "page_view"),
    ("product_id", "bigint", "add_to_cart"),
    ("quantity", "int", "add_to_cart"),
    ("price", "decimal(18,2)", "add_to_cart"),
    ("cart_value", "decimal(18,2)", "checkout"),
    ("order_id", "string", "purchase"),
    ("revenue", "decimal(18,2)", "purchase"),
    ("currency", "string", "purchase"),
)


def silver_schema() -> StructType:
    """``silver.events`` as created (every column nullable): the checked event's columns
    (:func:`spark_jobs.silver.clickstream.valid_events`; a unit test holds the two equal), the Kafka position, ingest time,
    the late flag and the batch that wrote it."""
    from pyspark.sql.types import (
        BooleanType,
        DateType,
        DecimalType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    types = {"string": StringType(), "bigint": LongType(), "int": IntegerType(), "decimal(18,2)": DecimalType(18, 2),
             "timestamp": TimestampType(), "date": DateType(), "boolean": BooleanType()}
    columns = [("event_id", "string"), ("event_type", "string"), ("user_id", "bigint"), ("session_id", "string"),
               ("event_time", "timestamp"), ("event_date", "date"), ("properties", "string"),
               *[(name, t) for name, t, _ in PROPERTY_COLUMNS], ("schema_version", "int"), ("_topic", "string"),
               ("_partition", "int"), ("_offset", "bigint"), ("_kafka_timestamp", "timestamp"),
               ("_ingest_time", "timestamp"), ("_late", "boolean"), ("_batch_id", "bigint")]
    return StructType([StructField(name, types[t], True) for name, t in columns])
