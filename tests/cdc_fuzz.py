"""Hypothesis strategies for Debezium-shaped CDC records, good and poisoned, with what the parse must make of each.

Shared by the unit fuzz tests (``tests/unit/test_silver_cdc_parse_fuzz.py``: the pure parse and one local-Spark
batch) and the real-topic test (``tests/integration/test_cdc_poison_fuzz.py``). Every generated record knows its
kind: ``good`` (the parse must give a change whose values equal ``expected``), ``bad`` (a reject with a reason:
which rule fires is not pinned, only that one does), ``tombstone`` (skipped and counted).
"""

from __future__ import annotations

import base64
import json
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import pyarrow as pa
from hypothesis import strategies as st
from hypothesis.errors import NonInteractiveExampleWarning

from spark_jobs.silver.cdc_parse import PARSE_COLUMNS

#: Names the lake reserves (a sample of each rule: exact, prefix, pattern), in random case by the strategy.
RESERVED = [*PARSE_COLUMNS, "_op", "_snapshot_rank", "_commit_lsn", "_change_lsn", "_source_ts", "_extra", "_n",
            "_count", "_deleted_at", "_fill_notes", "_t0_3", "_change_type", "_commit_version", "_commit_timestamp",
            "_metadata", "_row_id", "__delta_internal_is_row_deleted", "__x"]
#: Names PostgreSQL or Delta cannot have as a column.
BAD_NAMES = ["", "x" * 64, "é" * 40, "\ud800", "a\udfffb", "gift note", "we`ird", "a,b", "x;y", "t\tab", "n\nl",
             "(p)", "{c}", "e=q"]
#: A prefix for forged column names: never a real column of a shop table.
FORGED_PREFIX = "zz_forged_"


@dataclass
class Fuzzed:
    """One Kafka record and what the parse must make of it."""

    key: bytes | None
    value: bytes | None
    kind: str  # good | bad | tombstone
    expected: dict[str, Any] | None = None  # good: column -> value as Arrow hands it back
    why: str = ""  # bad: the poison generated ("deep": a change if the parsers can read it, see bad_record)


#: Any text, lone surrogates included (JSON can escape them; UTF-8 cannot hold them).
ANY_TEXT = st.text(st.characters(exclude_categories=()), max_size=20)
_JSON_SCALARS = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=True) | ANY_TEXT
#: Any JSON value, nested a little.
ANY_JSON = st.recursive(_JSON_SCALARS, lambda inner: st.lists(inner, max_size=4)
                        | st.dictionaries(ANY_TEXT, inner, max_size=4), max_leaves=12)


def _good_value(t: pa.DataType, narrow_times: bool) -> st.SearchStrategy[tuple[Any, Any]]:
    """(wire value as Debezium sends it, the value Arrow hands back) for a silver column of type ``t``."""
    ints = {pa.int8(): 2**7, pa.int16(): 2**15, pa.int32(): 2**31, pa.int64(): 2**63}
    if t in ints:
        return st.integers(-ints[t], ints[t] - 1).map(lambda v: (v, v))
    if pa.types.is_boolean(t):
        return st.booleans().map(lambda v: (v, v))
    if t == pa.float64():
        return st.floats(allow_nan=False).map(lambda v: (v, v))
    if t == pa.float32():
        return st.floats(width=32, allow_nan=False).map(lambda v: (v, v))
    if pa.types.is_string(t):
        return st.text(max_size=40).map(lambda v: (v, v))
    if pa.types.is_decimal(t):
        bound = Decimal(10) ** (t.precision - t.scale) - Decimal(1).scaleb(-t.scale)
        return st.decimals(-bound, bound, places=t.scale, allow_nan=False, allow_infinity=False).map(
            lambda d: (format(d, "f"), d))
    if pa.types.is_timestamp(t):
        low, high = (datetime(1970, 1, 1), datetime(2100, 1, 1)) if narrow_times else (datetime(1, 1, 2),
                                                                                         datetime(9999, 12, 30))
        return st.datetimes(low, high, timezones=st.just(UTC)).map(lambda d: (d.isoformat(), d))
    if pa.types.is_date32(t):
        return st.dates(date(1, 1, 1), date(9999, 12, 31)).map(lambda d: ((d - date(1970, 1, 1)).days, d))
    if pa.types.is_binary(t):
        return st.binary(max_size=20).map(lambda b: (base64.b64encode(b).decode(), b))
    raise ValueError(f"no generator for {t}")


@st.composite
def position(draw: st.DrawFn) -> dict[str, Any]:
    """A valid ``source``: ``sequence`` [commit, change] and ``lsn`` within bigint, maybe ``ts_ms``."""
    commit, change = draw(st.integers(0, 2**63 - 1)), draw(st.integers(0, 2**63 - 1))
    source: dict[str, Any] = {"version": "3.1.0.Final", "connector": "postgresql", "lsn": change,
                              "sequence": json.dumps([str(commit), str(change)]),
                              "snapshot": draw(st.sampled_from(["false", "true", "last", False]))}
    if draw(st.booleans()):
        source["ts_ms"] = draw(st.integers(0, 2**42))
    return source


def _envelope(draw: st.DrawFn, payload: Any) -> bytes:
    """The record as the connector sends it (bare payload), or as a JsonConverter envelope with its schema."""
    if draw(st.booleans()):
        return json.dumps({"schema": {"type": "struct", "fields": []}, "payload": payload}).encode()
    return json.dumps(payload).encode()


@st.composite
def good_record(draw: st.DrawFn, rows: pa.Schema, keys: list[str], *, extra_columns: bool = True,
                narrow_times: bool = False, key_values: st.SearchStrategy[int] | None = None,
                ops: Sequence[str] = ("c", "u", "r", "d")) -> Fuzzed:
    """A valid change: every column typed right (some null), a valid position; maybe extra columns with plain
    names (they go to ``_extra``), maybe the key only in the Kafka key. ``key_values``: the integer key's
    values (default: any of its type); ``narrow_times``: timestamps in 1970-2100 only."""
    op = draw(st.sampled_from(list(ops)))
    image: dict[str, Any] = {}
    expected: dict[str, Any] = {}
    for f in rows:
        wire, value = draw(_good_value(f.type, narrow_times))
        if f.name in keys and key_values is not None and pa.types.is_integer(f.type):
            wire = value = draw(key_values)
        if f.name not in keys and draw(st.integers(0, 4)) == 0:
            wire = value = None
        image[f.name] = wire
        expected[f.name] = value
    key_doc = {k: image[k] for k in keys}
    if extra_columns and draw(st.booleans()):
        image.update(draw(st.dictionaries(st.from_regex(r"x_[a-z0-9_]{1,20}", fullmatch=True), _JSON_SCALARS,
                                          max_size=3)))
    if draw(st.integers(0, 5)) == 0:  # the key only in the Kafka key (the parse's fallback)
        for k in keys:
            image[k] = None
    payload: dict[str, Any] = {"op": op, "source": draw(position()), "ts_ms": 1}
    payload["before" if op == "d" else "after"] = image
    if op != "d" and draw(st.booleans()):
        payload["before"] = None
    key = json.dumps(key_doc if draw(st.booleans()) else {"schema": {}, "payload": key_doc}).encode()
    return Fuzzed(key, _envelope(draw, payload), "good", expected)


def _nested(depth: int) -> str:
    return '{"n":' * depth + "1" + "}" * depth


@st.composite
def bad_record(draw: st.DrawFn, rows: pa.Schema, keys: list[str], *, refused: tuple[str, ...] = (),
               narrow_times: bool = False, key_values: st.SearchStrategy[int] | None = None) -> Fuzzed:
    """A record the parse must reject: a good one with one poison (chosen at random) applied."""
    base = draw(good_record(rows, keys, extra_columns=False, narrow_times=narrow_times, key_values=key_values))
    assert base.value is not None
    doc = json.loads(base.value)
    payload = doc.get("payload", doc)
    image_field = "before" if payload["op"] == "d" else "after"
    image = payload[image_field]
    for k in keys:  # the key in the image, so no poison hides behind a missing key
        image[k] = base.expected[k] if base.expected else image[k]
    typed = [f for f in rows if not pa.types.is_string(f.type)]
    ints = [f for f in rows if pa.types.is_integer(f.type)]
    poisons = ["not_json", "truncated", "top_not_object", "payload_not_object", "no_op", "bad_op", "truncate",
               "image_not_object", "position_past_64_bits", "no_position", "bad_ts_ms", "reserved_name", "bad_name",
               "deep", "too_many_columns", "missing_key"]
    poisons += ["no_after"] if payload["op"] != "d" else []
    poisons += ["wrong_type"] if typed else []
    poisons += ["int_out_of_range"] if ints else []
    poisons += ["forged_name"] if refused else []
    poisons += ["surrogate_value"] if any(pa.types.is_string(f.type) for f in rows) else []
    why = draw(st.sampled_from(poisons))
    value: bytes | None = None
    if why == "not_json":
        value = b"<" + draw(st.binary(max_size=50))
    elif why == "truncated":
        full = _envelope(draw, payload)
        value = full[:draw(st.integers(0, len(full) - 1))]
    elif why == "top_not_object":
        value = json.dumps(draw(st.none() | st.booleans() | st.integers() | st.text(max_size=10)
                                | st.lists(_JSON_SCALARS, max_size=3))).encode()
    elif why == "payload_not_object":
        value = json.dumps({"schema": {}, "payload": draw(st.none() | st.lists(_JSON_SCALARS, max_size=3)
                                                          | st.text(max_size=5) | st.integers())}).encode()
    elif why == "no_op":
        del payload["op"]
    elif why == "bad_op":
        payload["op"] = draw(ANY_JSON.filter(lambda v: v is not None and v not in ("c", "u", "d", "r", "t")))
    elif why == "truncate":
        payload["op"] = "t"
    elif why == "no_after":
        payload.pop("after")
    elif why == "image_not_object":
        payload[image_field] = draw(st.lists(_JSON_SCALARS, max_size=3) | st.text(max_size=5) | st.integers()
                                    | st.booleans())
    elif why == "position_past_64_bits":
        big = draw(st.integers(2**63, 2**200))
        pair = [str(big), str(draw(st.integers(0, 2**63 - 1)))]
        payload["source"]["sequence"] = json.dumps(pair if draw(st.booleans()) else pair[::-1])
    elif why == "no_position":
        payload["source"] = draw(st.sampled_from([None, {}, {"lsn": None}, {"sequence": "[]"}, "x"]))
    elif why == "bad_ts_ms":
        payload["source"]["ts_ms"] = draw(st.integers(2**53, 2**90) | st.text(max_size=5) | st.floats()
                                          | st.lists(st.integers(), max_size=2))
    elif why == "reserved_name":
        name = draw(st.sampled_from(RESERVED))
        image[name.upper() if draw(st.booleans()) else name] = draw(_JSON_SCALARS)
    elif why == "bad_name":
        image[draw(st.sampled_from(BAD_NAMES))] = draw(_JSON_SCALARS)
    elif why == "forged_name":
        image[draw(st.sampled_from(refused))] = draw(_JSON_SCALARS)
    elif why == "deep":
        # Past orjson's 1,024 levels; the stdlib reads what its recursion limit allows (hypothesis raises it): a
        # record it reads is a change whose new column "deep" goes to _extra (on the stack: refused, not in
        # PostgreSQL), one it cannot is a reject. Either way no exception.
        depth = draw(st.integers(1_100, 3_000) | st.just(50_000))
        text = _envelope(draw, payload).decode()
        marker = json.dumps(keys[0])
        # The nested value as a new column right after the key (built as text: json.dumps would recurse).
        value = text.replace(f"{marker}: ", f'"deep": {_nested(depth)}, {marker}: ', 1).encode()
    elif why == "too_many_columns":
        image.update({f"c{i}": i for i in range(1_601)})
    elif why == "missing_key":
        for k in keys:
            image[k] = None
        base.key = draw(st.sampled_from([None, b"{}", b"not json", b"[1]"]))
    elif why == "wrong_type":
        f = draw(st.sampled_from(typed))
        image[f.name] = draw(st.sampled_from([[1], {"a": 1}, "yesterday", "12,50"]) if not pa.types.is_boolean(f.type)
                             else st.sampled_from([1, "true", [True]]))
    elif why == "int_out_of_range":
        f = draw(st.sampled_from(ints))
        bound = 2 ** (f.type.bit_width - 1)
        image[f.name] = draw(st.integers(bound, 2**200) | st.integers(-(2**200), -bound - 1)
                             | st.sampled_from([1.5, 1e300]))
    elif why == "surrogate_value":
        f = draw(st.sampled_from([f for f in rows if pa.types.is_string(f.type)]))
        image[f.name] = "a\ud800b"
    if value is None:
        value = _envelope(draw, payload)
    return Fuzzed(base.key, value, "bad", base.expected if why == "deep" else None, why)


@st.composite
def tombstone(draw: st.DrawFn, keys: list[str], key_values: st.SearchStrategy[int] | None = None) -> Fuzzed:
    """A tombstone (null value) of a key (on a compacted topic it erases the key's older records: on the real
    topic pass ``key_values`` of keys the source never has)."""
    values = key_values if key_values is not None else st.integers(1, 10**6)
    return Fuzzed(json.dumps({k: draw(values) for k in keys}).encode(), None, "tombstone")


def record(rows: pa.Schema, keys: list[str], refused: tuple[str, ...] = ()) -> st.SearchStrategy[Fuzzed]:
    """Any of the three kinds."""
    return st.one_of(good_record(rows, keys), bad_record(rows, keys, refused=refused), tombstone(keys))


@st.composite
def wild_record(draw: st.DrawFn, rows: pa.Schema, keys: list[str]) -> tuple[bytes | None, bytes | None]:
    """An envelope whose every part may be any JSON (or bytes): no expectation but "no exception, a row each"."""
    names = st.sampled_from(rows.names) | ANY_TEXT
    image = draw(st.dictionaries(names, ANY_JSON, max_size=8) | ANY_JSON)
    payload = {"op": draw(st.sampled_from(["c", "u", "d", "r"]) | ANY_JSON), "after": image, "before": image,
               "source": draw(st.fixed_dictionaries({}, optional={"lsn": ANY_JSON, "sequence": ANY_JSON | st.text(),
                                                                  "ts_ms": ANY_JSON, "snapshot": ANY_JSON}))}
    value = draw(st.sampled_from([None, "bytes"]) | st.just("json"))
    key = draw(st.none() | st.binary(max_size=20) | ANY_JSON.map(lambda v: json.dumps(v).encode()))
    if value is None:
        return key, None
    if value == "bytes":
        return key, draw(st.binary(max_size=100))
    return key, json.dumps(draw(st.sampled_from([payload, {"schema": None, "payload": payload}]))).encode()


def sample(strategy: st.SearchStrategy[Fuzzed], n: int) -> list[Fuzzed]:
    """``n`` varied draws of ``strategy`` outside ``@given``: for a batch bigger than one example's size limit
    (``@given``'s first example is also its simplest), e.g. one Spark batch or a sample for the real topic."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NonInteractiveExampleWarning)
        return [strategy.example() for _ in range(n)]
