"""Clickstream records -> checked rows, in the driver on Arrow (the streaming app's parse of ``events.clickstream``).

The streaming app collects each micro-batch's raw Kafka records as one Arrow
table (one Spark job, no parse) and classifies them here, in Python:

* :class:`FastCheck` is the contract compiled into plain Python tests (types,
  enums, patterns, lengths, ranges, the event-time rules) over the strict JSON
  parse of :func:`spark_jobs.contracts.events.parse_record`. It only ever
  *accepts*; a record it does not accept goes to
  :func:`spark_jobs.contracts.events.check_record` (the JSON Schema validator),
  which gives the reason code and the detail, and also has the last word: the
  valid records are exactly the ones ``check_record`` accepts.
* The typed columns of a valid record are those of
  :func:`spark_jobs.silver.events.parse_events` (same names, types, values);
  ``tests/unit/test_events_arrow.py`` compares the two on the parity corpus.

Why not Spark: the variant-based checks of ``parse_events`` cost ~110 us of CPU
per event on this machine (measured, two cores: 50,000 events ~3 s); the strict
parse and the compiled checks here cost ~15-20 us, and the hot path then needs no
Spark job besides reading Kafka. ``parse_events`` stays the Spark form of the
same contract: ``lake reconcile events`` classifies with it, so the two
implementations check each other on every reconcile.

Large batches (a backlog) are split over ``LAKE_EVENTS_PARSE_PROCESSES``
processes (:class:`ParallelCheck`): the parse is pure Python, so one process
is one core.

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

from spark_jobs.contracts.events import (
    INT64_MAX,
    INT64_MIN,
    MAX_EVENT_BYTES,
    MAX_FUTURE_SECONDS,
    ContractRules,
    FieldRule,
    check_record,
    field_rules,
    parse_event_time,
    parse_record,
)
from spark_jobs.hot.events import epoch_micros, from_epoch_micros

if TYPE_CHECKING:
    import pyarrow as pa

#: Input columns (the Kafka source's, ``timestamp`` renamed): what :func:`check_records` reads.
RAW_COLUMNS = ("key", "value", "topic", "partition", "offset", "kafka_timestamp")

_MICROS_PER_DAY = 86_400_000_000
_FUTURE_MICROS = MAX_FUTURE_SECONDS * 1_000_000


def _compile(rule: FieldRule) -> Callable[[Any], bool]:
    """One field rule -> a test that is True only when every keyword of the rule holds (JSON Schema semantics).

    One closure per rule, no loop over keywords: this runs for every field of every event.
    """
    if rule.json_type == "string":
        allowed = None if rule.enum is None else frozenset(rule.enum)
        const = rule.const
        lo = 0 if rule.min_length is None else rule.min_length
        hi = sys.maxsize if rule.max_length is None else rule.max_length
        search = None if rule.pattern is None else re.compile(rule.pattern).search  # not anchored, as JSON Schema

        def string(v: Any) -> bool:
            return (type(v) is str and (allowed is None or v in allowed) and (const is None or v == const)
                    and lo <= len(v) <= hi and (search is None or search(v) is not None))
        return string
    if rule.json_type == "integer":
        const = rule.const
        minimum = INT64_MIN if rule.minimum is None else max(INT64_MIN, rule.minimum)
        maximum = INT64_MAX if rule.maximum is None else min(INT64_MAX, rule.maximum)

        def integer(v: Any) -> bool:
            return type(v) is int and minimum <= v <= maximum and (const is None or v == const)
        return integer
    if rule.json_type == "object":
        return lambda v: type(v) is dict
    return lambda v: True  # "any": presence is the whole rule


class FastCheck:
    """The contract as plain Python tests: ``accepts(doc, kafka_us)`` is True only for valid events.

    Sound, not complete: anything it does not accept is classified by
    ``check_record``. Requires the document to be the result of
    ``parse_record`` (no duplicate keys, no NaN, exact integers).
    """

    def __init__(self, rules: ContractRules | None = None) -> None:
        rules = rules or field_rules()
        self.top = [(r.name, r.required, _compile(r)) for r in rules.fields]
        self.allowed = None if rules.additional_fields else frozenset(r.name for r in rules.fields)
        self.by_type = {etype: [(r.name, r.required, _compile(r)) for r in prop_rules]
                        for etype, prop_rules in rules.by_event_type.items()}

    def accepts(self, doc: Any, kafka_us: int) -> bool:
        return self.event_micros(doc, kafka_us) is not None

    def event_micros(self, doc: Any, kafka_us: int) -> int | None:
        """The event time in epoch microseconds when ``doc`` is accepted, else None."""
        if type(doc) is not dict:
            return None
        if self.allowed is not None and not self.allowed.issuperset(doc):
            return None
        if not _all_hold(self.top, doc):
            return None
        prop_rules = self.by_type.get(doc.get("event_type"))  # type: ignore[arg-type]
        if prop_rules is not None:
            props = doc.get("properties")
            if type(props) is not dict or not _all_hold(prop_rules, props):
                return None
        text = doc.get("event_time")
        if type(text) is not str:
            return None
        when = parse_event_time(text)
        if when is None:
            return None
        micros = epoch_micros(when)
        return micros if micros <= kafka_us + _FUTURE_MICROS else None


def _all_hold(rules: Sequence[tuple[str, bool, Callable[[Any], bool]]], obj: dict[str, Any]) -> bool:
    for name, required, test in rules:
        if name in obj:
            if not test(obj[name]):
                return False
        elif required:
            return False
    return True


def properties_text(props: Any) -> str:
    """The ``properties`` column: the object as compact JSON with sorted keys (what Spark's ``to_json`` of the
    parsed variant gives for the contract's strings and integers)."""
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
    valid, else a reason code of ``spark_jobs.contracts.events.REASONS``),
    ``_error`` (the detail naming the field), and for valid rows ``_event_id``,
    ``_event_type``, ``_user_id`` int64, ``_session_id``, ``_event_time``
    timestamp[us, UTC], ``_event_date`` date32 (its UTC date), ``_properties``
    (JSON text, sorted keys), ``_p_<name>`` for every typed property of the
    event's own type (NULL for other types), ``_schema_version`` int32.
    Grain: one row per input row, in input order.
    """
    import pyarrow as pa

    from spark_jobs.silver.events import PROPERTY_COLUMNS

    fast = fast or FastCheck(rules)
    values = raw.column("value").to_pylist()
    kafka_us = raw.column("kafka_timestamp").cast(pa.int64()).to_pylist()
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


# --------------------------------------------------------------------------- several processes

#: Batches smaller than this are parsed in the driver process alone (the hand-off costs more than it saves).
PARALLEL_MIN_ROWS = 20_000

_WORKER_CHECK: FastCheck | None = None


def _to_ipc(table: pa.Table) -> bytes:
    """Arrow IPC stream bytes (only the slice's data, unlike pickling a sliced table)."""
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def _from_ipc(data: bytes) -> pa.Table:
    import pyarrow as pa

    return pa.ipc.open_stream(data).read_all()


def _check_in_worker(data: bytes) -> bytes:
    global _WORKER_CHECK  # one compiled contract per worker process
    if _WORKER_CHECK is None:
        _WORKER_CHECK = FastCheck()
    return _to_ipc(check_records(_from_ipc(data), fast=_WORKER_CHECK))


class ParallelCheck:
    """:func:`check_records` over ``processes`` cores: the driver parses one slice, worker processes the rest.

    Workers are started with ``spawn`` (never ``fork`` a process that runs a
    JVM gateway and threads) on first use; :meth:`warm` starts them ahead.
    A worker that dies fails the batch with ``BrokenProcessPool`` (the query
    then fails and the supervisor restarts the app; nothing is committed
    for that batch). Rows come back in input order.
    """

    def __init__(self, processes: int, min_rows: int = PARALLEL_MIN_ROWS) -> None:
        self.processes = max(1, processes)
        self.min_rows = min_rows
        self.fast = FastCheck()
        self._pool: Any = None

    def _executor(self) -> Any:
        if self._pool is None:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            self._pool = ProcessPoolExecutor(self.processes - 1, mp_context=multiprocessing.get_context("spawn"))
        return self._pool

    def warm(self) -> None:
        """Start the workers and load the contract in them (a first batch does not wait for it)."""
        if self.processes > 1:
            import pyarrow as pa

            empty = pa.table({c: pa.array([], t) for c, t in _raw_types().items()})
            for future in [self._executor().submit(_check_in_worker, _to_ipc(empty))
                           for _ in range(self.processes - 1)]:
                future.result()

    def check(self, raw: pa.Table) -> pa.Table:
        import pyarrow as pa

        if self.processes == 1 or raw.num_rows < self.min_rows:
            return check_records(raw, fast=self.fast)
        size = -(-raw.num_rows // self.processes)
        futures = [self._executor().submit(_check_in_worker, _to_ipc(raw.slice(start, size)))
                   for start in range(size, raw.num_rows, size)]
        first = check_records(raw.slice(0, size), fast=self.fast)
        return pa.concat_tables([first, *[_from_ipc(f.result()) for f in futures]])

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None


def _raw_types() -> dict[str, pa.DataType]:
    import pyarrow as pa

    return {"key": pa.binary(), "value": pa.binary(), "topic": pa.string(), "partition": pa.int32(),
            "offset": pa.int64(), "kafka_timestamp": pa.timestamp("us", tz="UTC")}
