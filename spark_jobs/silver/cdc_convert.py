"""Debezium wire values (JsonConverter JSON) -> Arrow-ready Python values of a silver column's type.

Runs inside the CDC parse on Spark executors (:mod:`spark_jobs.silver.cdc_parse`); every
converter is a plain function, so it pickles and imports there.
"""

from __future__ import annotations

import base64
import binascii
import json
import struct
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any

import pyarrow as pa

from spark_jobs.hot.windows import epoch_micros

_INT_RANGES = {pa.int8(): 2**7, pa.int16(): 2**15, pa.int32(): 2**31, pa.int64(): 2**63}


class WireMismatch(Exception):
    """A wire value of the wrong JSON type for its column (the row image does not fit the table)."""


class BadWireValue(Exception):
    """A wire value of the right JSON type that does not convert (``12,50`` for a decimal), or a number outside
    the column type's range; ``args``: (the value's text, why or None)."""

    def __init__(self, text: str, why: str | None = None) -> None:
        super().__init__(text, why)


def json_kind(v: Any) -> str:
    """The JSON type of a wire value, for reasons ("a JSON string")."""
    kinds = {bool: "boolean", int: "number", float: "number", str: "string", list: "array", dict: "object"}
    return "null" if v is None else kinds.get(type(v), type(v).__name__)


def clip(text: str, limit: int = 80) -> str:
    """``text`` cut to ``limit`` characters (a forged value can be megabytes; a reason names it, not copies it)."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


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


def json_text(v: Any) -> str:
    """Compact JSON text of a wire value (what a string column or ``_extra`` keeps)."""
    return json.dumps(v, separators=(",", ":"), ensure_ascii=False)


def _number_text(v: int | float) -> str:
    """A number's text for a reason, without the stdlib's 4,300-digit limit on ``str(int)`` in the way."""
    if type(v) is int and v.bit_length() > 256:
        return f"{'-' if v < 0 else ''}an integer of {v.bit_length()} bits"
    return str(v)


def converter(field: pa.Field) -> tuple[Callable[[Any], Any], bool]:
    """(wire JSON value -> Arrow-ready Python value, fallible) for a silver column.

    Raises ``WireMismatch`` for a JSON type the column cannot take (the row image
    does not fit the table), ``BadWireValue`` for a text that does not convert.
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
        return (lambda v: v if isinstance(v, str) else json_text(v)), False
    if dt in _INT_RANGES:
        bound = _INT_RANGES[dt]

        def integer(v: Any) -> int:
            if type(v) is float:  # orjson reads an integer past 64 bits as a float
                raise BadWireValue(_number_text(v), f"not an integer in the {sql_type_name(dt)} range")
            if type(v) is not int:
                raise WireMismatch
            if not -bound <= v < bound:
                raise BadWireValue(_number_text(v), f"outside the {sql_type_name(dt)} range")
            return v
        return integer, False
    if pa.types.is_boolean(dt):
        def boolean(v: Any) -> bool:
            if type(v) is not bool:
                raise WireMismatch
            return v
        return boolean, False
    if pa.types.is_floating(dt):
        single = dt == pa.float32()

        def floating(v: Any) -> float:
            if type(v) not in (int, float):
                raise WireMismatch
            try:
                value = float(v)
                if single:
                    struct.pack("<f", value)  # OverflowError past float's range (Arrow would store inf)
            except OverflowError as exc:
                raise BadWireValue(_number_text(v), f"outside the {sql_type_name(dt)} range") from exc
            return value
        return floating, False
    if pa.types.is_date32(dt):
        def days(v: Any) -> int:
            if type(v) is not int:
                raise WireMismatch
            if not -(2**31) <= v < 2**31:
                raise BadWireValue(_number_text(v), "outside the date range")
            return v
        return days, False
    if pa.types.is_decimal(dt):
        exponent = Decimal(1).scaleb(-dt.scale)
        limit = Decimal(10) ** (dt.precision - dt.scale)

        def decimal(v: Any) -> Decimal:
            text = v if isinstance(v, str) else json_text(v)
            try:
                value = Decimal(text.strip()).quantize(exponent, rounding=ROUND_HALF_UP)
            except (InvalidOperation, ValueError) as exc:
                raise BadWireValue(text) from exc
            if not value.is_finite() or abs(value) >= limit:
                raise BadWireValue(text)
            return value
        return decimal, True
    if pa.types.is_timestamp(dt) and dt.tz is not None:
        def timestamp(v: Any) -> int:
            text = v if isinstance(v, str) else json_text(v)
            try:
                value = datetime.fromisoformat(text.strip())
                # An offset can move a time at the ends of datetime's range past them (OverflowError).
                return epoch_micros(value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC))
            except (ValueError, OverflowError) as exc:
                raise BadWireValue(text) from exc
        return timestamp, True
    if pa.types.is_binary(dt) or pa.types.is_large_binary(dt):
        def binary(v: Any) -> bytes:
            text = v if isinstance(v, str) else json_text(v)
            try:
                return base64.b64decode(text, validate=True)
            except (binascii.Error, ValueError) as exc:
                raise BadWireValue(text) from exc
        return binary, True
    raise ValueError(
        f"column {field.name!r}: silver type {dt} is not supported by the CDC parse; supported are integers, "
        "boolean, float/double, string, decimal, date, timestamp (with time zone) and binary")
