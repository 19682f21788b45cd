"""``lake bench contract``: the events contract check, ours against maintained JSON Schema validators (issue 34).

One process, no Spark. The loadgen's own generator (:class:`spark_jobs.loadgen.clickstream.ClickstreamGenerator`,
with late, duplicate and bad records at the share the pipeline tests use) makes N records as the raw JSON bytes
a producer sends; every candidate then checks the SAME records, interleaved round by round
(ours, jsonschema, jsonschema-rs, fastjsonschema, ..., then again), so a busy machine slows them alike:

* ``ours``: the stream's per-record verdict unit, the loop of
  :func:`spark_jobs.silver.clickstream_arrow.check_records` without its typed columns: size check, the parse
  (``fast_doc``: orjson's, kept when it round-trips, else the strict ``parse_record``), then
  :class:`~spark_jobs.silver.clickstream_arrow.ContractCheck` (jsonschema-rs plus the contract's own rules since
  the switch of issue 34: ``event_micros``, and ``reject`` for the reason code and detail of a record it does not
  accept, what ``quarantine.events`` stores). The ratios are to this row.
* ``ours_check_records``: ``check_records`` itself over Arrow batches of 10,000 rows (Spark's
  ``spark.sql.execution.arrow.maxRecordsPerBatch``), typed columns included: what a Python worker runs.
* ``jsonschema`` (pinned; the reference ``check_record`` uses it), ``jsonschema_rs`` and ``fastjsonschema``
  (the last two only when installed): the same envelope as ours (size check, the same parse, a JSON object), then the
  library's validator, prepared once, on the parsed object; for a reject, the library's errors mapped to our
  reason codes (``required`` -> missing_field, ``type`` -> wrong_type, any other keyword -> invalid_value; the
  most severe when it reports several). They check the schema only: the two ``event_time`` rules JSON Schema
  cannot say (a real calendar instant, at most ``MAX_FUTURE_SECONDS`` after the Kafka timestamp) are not in
  their figures, which flatters them; the hand-made records of :func:`_edge_cases` show where that and JSON
  Schema's own "integer" (``42.0`` is one) change a verdict.
* ``jsonschema_rs_rules``: ``jsonschema_rs`` plus those rules in Python (:func:`_contract_extras`): the sketch
  measured before the switch; ``ours`` is its production form now (details as ``check_record`` words them, the
  reference's verdict for a record the library cannot read).
* ``parse_only``: the shared envelope alone, no validation: the floor under every row.

After the rounds each candidate runs once more on the records ours accepts and once on those it rejects (the cost
of either path), not interleaved.

Prints figures, never asserts (docs/benchmarks.md records them).
"""

from __future__ import annotations

import gc
import importlib
import importlib.util
import json
import logging
import os
import statistics
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from typing import Any

from spark_jobs.contracts.clickstream import (
    EVENT_TIME_RE,
    INT64_MAX,
    INT64_MIN,
    INVALID_VALUE,
    MAX_EVENT_BYTES,
    MAX_FUTURE_SECONDS,
    MISSING_FIELD,
    NOT_JSON,
    OVERSIZED,
    REASONS,
    WRONG_TYPE,
    load_schema,
    parse_record,
)
from spark_jobs.contracts.events_rules import field_rules
from spark_jobs.loadgen.clickstream import ClickstreamGenerator
from spark_jobs.silver.clickstream_arrow import EventTimes, contract_check, fast_doc

log = logging.getLogger(__name__)

#: Shares of late, duplicate and bad records (the events pipeline and loadgen tests' mix); bad records are
#: split evenly across ``BAD_KINDS`` by the generator.
LATE, DUP, BAD = 0.05, 0.05, 0.04
#: Simulated produce rate: the generator's clock (event times, Kafka timestamps) advances 1/RATE s a record.
RATE = 5000.0
#: The generator's clock starts here (fixed, so a seed gives the same bytes on every run).
START = datetime(2026, 11, 28, tzinfo=UTC).timestamp()
USERS = 10_000
#: Rows per Arrow batch for ``ours_check_records`` (Spark's default ``arrow.maxRecordsPerBatch``).
ARROW_BATCH = 10_000
#: A validator within this factor of ours (median seconds) that agrees on every verdict could replace it.
WITHIN = 1.5
EXAMPLES = 3

Verdict = tuple[str, str] | None
Values = Sequence[bytes | None]


@dataclass
class Corpus:
    """The records every candidate checks: values, their Kafka timestamps (epoch us), and what the generator made."""

    values: list[bytes | None]
    kafka_us: list[int]
    kinds: Counter[str] = field(default_factory=Counter)


def generate(n: int, seed: int, progress: Callable[[str], None] | None = None) -> Corpus:
    """``n`` records of the loadgen's generator (``LATE``/``DUP``/``BAD`` mix), Kafka timestamps at ``RATE``/s."""
    now = START

    def clock() -> float:
        return now

    gen = ClickstreamGenerator(seed, list(range(1, USERS + 1)), late=LATE, dup=DUP, bad=BAD, clock=clock)
    values: list[bytes | None] = []
    kafka_us: list[int] = []
    kinds: Counter[str] = Counter()
    step = max(1, n // 5)
    for i in range(n):
        now = START + i / RATE
        rec = gen.next_record()
        values.append(rec.value)
        kafka_us.append(int(now * 1000) * 1000)  # Kafka timestamps are milliseconds
        kinds[rec.kind] += 1
        if progress is not None and (i + 1) % step == 0 and i + 1 < n:
            progress(f"generated {i + 1:,} of {n:,} records")
    return Corpus(values, kafka_us, kinds)


# --------------------------------------------------------------------------- the candidates


def _envelope(value: bytes | None) -> tuple[Any, Verdict]:
    """``(doc, None)`` for a JSON object parsed as ours parses it, else ``(None, reject)``: every library candidate's
    front (size, parse, object), the same code and cost for all of them."""
    if value is None:
        return None, (NOT_JSON, "record has no value (tombstone)")
    if len(value) > MAX_EVENT_BYTES:
        return None, (OVERSIZED, f"value is {len(value)} bytes, more than the {MAX_EVENT_BYTES} allowed")
    doc = fast_doc(value)
    if doc is None:
        try:
            doc = parse_record(value)
        except ValueError as exc:  # UnicodeDecodeError, JSONDecodeError, the strict parser's own
            return None, (NOT_JSON, f"value is not JSON: {exc}")
    if type(doc) is not dict:
        return None, (NOT_JSON, f"value is JSON but not an object (got {type(doc).__name__})")
    return doc, None


def _code(keyword: Any) -> str:
    return {"required": MISSING_FIELD, "type": WRONG_TYPE}.get(str(keyword), INVALID_VALUE)


def _worst(found: list[tuple[str, str]]) -> tuple[str, str]:
    return min(found, key=lambda cd: REASONS.index(cd[0]))


def _path(parts: Any) -> str:
    return ".".join(str(p) for p in parts) or "(record)"


Run = Callable[[], Any]
Prepare = Callable[[Values, Sequence[int]], tuple[Run, Callable[[Any], list[Verdict]]]]


def _as_is(result: Any) -> list[Verdict]:
    verdicts: list[Verdict] = result
    return verdicts


def _ours() -> Prepare:
    contract = contract_check()

    def prepare(values: Values, kafka_us: Sequence[int]) -> tuple[Run, Callable[[Any], list[Verdict]]]:
        def run() -> list[Verdict]:
            event_micros, reject = contract.event_micros, contract.reject
            out: list[Verdict] = [None] * len(values)
            for i, value in enumerate(values):  # check_records' loop, up to the verdict
                doc: Any = None
                if value is not None and len(value) <= MAX_EVENT_BYTES:
                    doc = fast_doc(value)
                    if doc is None:
                        try:
                            doc = parse_record(value)
                        except ValueError:
                            doc = None
                if event_micros(doc, kafka_us[i]) is None:
                    out[i] = reject(value, doc, kafka_us[i])
            return out

        return run, _as_is

    return prepare


def _ours_check_records() -> Prepare:
    import pyarrow as pa

    from spark_jobs.silver.clickstream_arrow import check_records

    contract = contract_check()

    def prepare(values: Values, kafka_us: Sequence[int]) -> tuple[Run, Callable[[Any], list[Verdict]]]:
        tables = []
        for lo in range(0, len(values), ARROW_BATCH):
            part = values[lo:lo + ARROW_BATCH]
            n = len(part)
            tables.append(pa.table({
                "key": pa.array([None] * n, pa.binary()), "value": pa.array(part, pa.binary()),
                "topic": pa.array(["events.clickstream"] * n, pa.string()), "partition": pa.array([0] * n, pa.int32()),
                "offset": pa.array(range(lo, lo + n), pa.int64()),
                "kafka_timestamp": pa.array(kafka_us[lo:lo + ARROW_BATCH], pa.int64()).cast(
                    pa.timestamp("us", tz="UTC"))}))

        def run() -> list[Any]:
            return [check_records(t, contract) for t in tables]

        def verdicts(result: list[Any]) -> list[Verdict]:
            out: list[Verdict] = []
            for t in result:
                out += [None if r is None else (r, e) for r, e in zip(t.column("_reason").to_pylist(),
                                                                    t.column("_error").to_pylist(), strict=True)]
            return out

        return run, verdicts

    return prepare


def _library(validate: Callable[[Any, int], Verdict]) -> Prepare:
    """A library candidate: the shared envelope, then ``validate(doc, kafka_us)`` (None: valid, else the mapped
    reject)."""

    def prepare(values: Values, kafka_us: Sequence[int]) -> tuple[Run, Callable[[Any], list[Verdict]]]:
        def run() -> list[Verdict]:
            envelope = _envelope
            out: list[Verdict] = [None] * len(values)
            for i, value in enumerate(values):
                doc, bad = envelope(value)
                out[i] = bad if doc is None else validate(doc, kafka_us[i])
            return out

        return run, _as_is

    return prepare


def _parse_only() -> Prepare:
    return _library(lambda doc, kafka_us: None)


def _jsonschema() -> Prepare:
    from jsonschema import Draft202012Validator, FormatChecker

    schema = load_schema()
    Draft202012Validator.check_schema(schema)
    iter_errors = Draft202012Validator(schema, format_checker=FormatChecker(["uuid"])).iter_errors

    def validate(doc: Any, kafka_us: int) -> Verdict:
        errors = iter_errors(doc)
        first = next(errors, None)
        if first is None:
            return None
        return _worst([(_code(e.validator), f"{_path(e.absolute_path)}: {e.message[:200]}") for e in (first, *errors)])

    return _library(validate)


def _contract_extras() -> Callable[[Any, int], list[tuple[str, str]]]:
    """The rules of our contract that JSON Schema cannot say, as a switch would have to keep them beside a library:
    "integer" is a signed 64-bit int, never a float such as ``42.0`` (JSON Schema's integers include those; beyond 64
    bits it is wrong_type, not the schema's invalid_value), and ``event_time``
    is a real instant at most ``MAX_FUTURE_SECONDS`` after the Kafka timestamp. ``(doc, kafka_us) -> rejects``."""
    rules = field_rules()
    top = tuple(r.name for r in rules.fields if r.json_type == "integer")
    by_type = {t: tuple(r.name for r in rs if r.json_type == "integer") for t, rs in rules.by_event_type.items()}
    micros = EventTimes().micros
    future = MAX_FUTURE_SECONDS * 1_000_000

    def bad_int(v: Any) -> bool:
        return type(v) is float or (type(v) is int and not INT64_MIN <= v <= INT64_MAX)

    def extras(doc: Any, kafka_us: int) -> list[tuple[str, str]]:
        found = [(WRONG_TYPE, f"{n}: expected integer, got {type(doc[n]).__name__} {doc[n]!r}"[:200])
                 for n in top if bad_int(doc.get(n))]
        props = doc.get("properties")
        if type(props) is dict:
            found += [(WRONG_TYPE, f"properties.{n}: expected integer, got {type(props[n]).__name__} {props[n]!r}"[:200])
                      for n in by_type.get(doc.get("event_type"), ()) if bad_int(props.get(n))]
        text = doc.get("event_time")
        if type(text) is str:
            us = micros(text)
            if us is None:
                if EVENT_TIME_RE.fullmatch(text) is not None:  # else the schema's pattern rejects it
                    found.append((INVALID_VALUE, f"event_time: {text!r} is not a real date and time"))
            elif us > kafka_us + future:
                found.append((INVALID_VALUE, f"event_time: {text} is more than {MAX_FUTURE_SECONDS} s after the "
                                             "record's time"))
        return found

    return extras


def _jsonschema_rs(with_rules: bool = False) -> Prepare:
    rs: Any = importlib.import_module("jsonschema_rs")
    validator = rs.validator_for(load_schema(), validate_formats=True)
    is_valid, iter_errors = validator.is_valid, validator.iter_errors
    extras = _contract_extras() if with_rules else None

    def validate(doc: Any, kafka_us: int) -> Verdict:
        if is_valid(doc):
            if extras is None:
                return None
            more = extras(doc, kafka_us)
            return _worst(more) if more else None
        found = [(_code(e.schema_path[-1] if e.schema_path else ""), f"{_path(e.instance_path)}: {e.message[:200]}")
                 for e in iter_errors(doc)]
        return _worst(found + extras(doc, kafka_us) if extras is not None else found)

    return _library(validate)


def _fastjsonschema() -> Prepare:
    fjs: Any = importlib.import_module("fastjsonschema")
    check = fjs.compile(load_schema())
    failed = fjs.JsonSchemaValueException

    def validate(doc: Any, kafka_us: int) -> Verdict:
        try:
            check(doc)
        except failed as exc:  # the first error only
            return _code(exc.rule), f"{exc.name}: {exc.message[:200]}"
        return None

    return _library(validate)


@dataclass(frozen=True)
class Candidate:
    name: str
    module: str | None  # the library it needs (None: the project's own)
    what: str  # the unit timed
    reason: str  # can it give the quarantine's reason?
    make: Callable[[], Prepare]
    compare: bool = True  # verdicts compared with ours


CANDIDATES: tuple[Candidate, ...] = (
    Candidate("ours", None, "size check, fast_doc/parse_record, ContractCheck.event_micros (jsonschema-rs plus our "
              "rules), ContractCheck.reject for a record it does not accept (check_records' per-record loop without "
              "the typed columns)",
              "yes: the reason code and the detail naming the field, as quarantine.events stores them", _ours),
    Candidate("ours_check_records", None, "spark_jobs.silver.clickstream_arrow.check_records over Arrow batches of "
              f"{ARROW_BATCH:,} rows, typed columns included (what the stream's Python worker runs)",
              "yes (same as ours)", _ours_check_records),
    Candidate("jsonschema", "jsonschema", "the same envelope, then Draft202012Validator (uuid format checked) on the "
              "parsed object; for a reject all its errors, the most severe mapped to our codes",
              "yes: every error with its keyword, path and message (check_record maps them to our reasons today)",
              _jsonschema),
    Candidate("jsonschema_rs", "jsonschema_rs", "the same envelope, then jsonschema_rs.validator_for(schema, "
              "validate_formats=True).is_valid; for a reject iter_errors, the most severe mapped to our codes",
              "yes: every error with its kind, instance_path, schema_path and message: mappable to our codes",
              _jsonschema_rs),
    Candidate("jsonschema_rs_rules", "jsonschema_rs", "jsonschema_rs as above, plus the contract's rules JSON "
              "Schema cannot say (integers are ints, not 42.0; event_time a real instant, not in the future), in "
              "Python: the sketch measured before ours switched to it", "yes (as jsonschema_rs, plus those rules' own details)",
              lambda: _jsonschema_rs(with_rules=True)),
    Candidate("fastjsonschema", "fastjsonschema", "the same envelope, then fastjsonschema.compile(schema) on the "
              "parsed object (it raises on the first error, mapped to our code)",
              "partly: the first error only (rule, path, message), not the most severe of several", _fastjsonschema),
    Candidate("parse_only", None, "the shared envelope alone (size check, fast_doc/parse_record, is an object), no "
              "validation: the floor under every row", "n/a", _parse_only, compare=False),
)


def available(candidate: Candidate) -> bool:
    return candidate.module is None or importlib.util.find_spec(candidate.module) is not None


def _version(module: str) -> str | None:
    dist = {"jsonschema_rs": "jsonschema-rs"}.get(module, module)
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


# --------------------------------------------------------------------------- edge cases


def _edge_cases() -> list[tuple[str, bytes, int]]:
    """Records the generator does not make, where ours and plain JSON Schema may part: ``(name, value, kafka_us)``."""
    kafka_us = int(START * 1_000_000)
    event_id = "0b8e7f0e-1c2d-4e5f-8a9b-0c1d2e3f4a5b"
    base: dict[str, Any] = {"event_id": event_id, "event_type": "page_view", "user_id": 42,
            "session_id": "s-1", "event_time": "2026-11-27T23:59:59.123Z", "properties": {"page": "/"},
            "schema_version": 1}

    def enc(**changes: Any) -> bytes:
        return json.dumps({**base, **changes}, separators=(",", ":")).encode()

    return [(name, value, kafka_us) for name, value in (
        ("valid page_view", enc()),
        ("user_id 42.0", enc().replace(b'"user_id":42', b'"user_id":42.0')),
        ("user_id 1e2", enc().replace(b'"user_id":42', b'"user_id":1e2')),
        ("schema_version 1.0", enc().replace(b'"schema_version":1', b'"schema_version":1.0')),
        ("user_id 2**63", enc(user_id=2**63)),
        ("user_id 2**70", enc(user_id=2**70)),
        ("event_time not a real date", enc(event_time="2026-02-30T00:00:00Z")),
        ("event_time leap second", enc(event_time="2026-11-27T23:59:60Z")),
        ("event_time 10 min after the Kafka timestamp", enc(event_time="2026-11-28T00:10:00Z")),
        ("event_id with a trailing newline", enc(event_id=event_id + "\n")),
        ("revenue with 3 decimals", enc(event_type="purchase",
                                        properties={"order_id": "o-1", "revenue": "1.234", "currency": "EUR"})),
    )]


def _show(verdict: Verdict) -> str:
    return "valid" if verdict is None else f"{verdict[0]}: {verdict[1][:120]}"


def edge_verdicts(prepare: Prepare, reference: Prepare) -> list[dict[str, Any]]:
    """Each edge case's verdict by ``prepare`` beside ours (``reference``); an exception is a verdict too."""
    rows = []
    for name, value, kafka_us in _edge_cases():
        shown = []
        for prep in (reference, prepare):
            run, verdicts = prep([value], [kafka_us])
            try:
                shown.append(_show(verdicts(run())[0]))
            except Exception as exc:  # noqa: BLE001 - a library that raises on a record is a finding, not a crash
                shown.append(f"raises {type(exc).__name__}: {str(exc)[:120]}")
        rows.append({"case": name, "ours": shown[0], "theirs": shown[1],
                     "same_valid": shown[0].startswith("valid") == shown[1].startswith("valid"),
                     "same_code": shown[0].split(":")[0] == shown[1].split(":")[0]})
    return rows


# --------------------------------------------------------------------------- the run


def _agreement(values: Values, ours: list[Verdict], theirs: list[Verdict]) -> dict[str, Any]:
    accepts, rejects, codes = 0, 0, 0
    examples: list[dict[str, str]] = []
    for value, a, b in zip(values, ours, theirs, strict=True):
        if (a is None) == (b is None):
            if a is not None and b is not None and a[0] != b[0]:
                codes += 1
            continue
        if a is None:
            rejects += 1
        else:
            accepts += 1
        if len(examples) < EXAMPLES:
            shown = "None" if value is None else value[:160].decode("utf-8", "replace")
            examples.append({"value": shown + ("..." if value is not None and len(value) > 160 else ""),
                             "ours": _show(a), "theirs": _show(b)})
    return {"accepts_what_ours_rejects": accepts, "rejects_what_ours_accepts": rejects,
            "disagreements": accepts + rejects, "examples": examples, "reason_codes_differ": codes}


def _split(present: Sequence[Candidate], preps: dict[str, Prepare], corpus: Corpus,
           ours: list[Verdict], say: Callable[[str], None]) -> dict[str, dict[str, Any]]:
    """Each candidate once more, on the records ours accepts and then on those it rejects (one pass each, after
    the rounds): microseconds a record on either path."""
    parts = {"accepted": [i for i, v in enumerate(ours) if v is None],
             "rejected": [i for i, v in enumerate(ours) if v is not None]}
    out: dict[str, dict[str, Any]] = {}
    for c in present:
        if not c.compare:
            continue
        prep = preps[c.name]
        out[c.name] = {}
        for label, idx in parts.items():
            if not idx:
                continue
            run, _ = prep([corpus.values[i] for i in idx], [corpus.kafka_us[i] for i in idx])
            gc.collect()
            t = time.perf_counter()
            run()
            s = time.perf_counter() - t
            out[c.name][label] = {"records": len(idx), "us_per_record": round(s / len(idx) * 1e6, 3)}
        say(f"split: {c.name:<18} " + ", ".join(f"{k} {v['us_per_record']:.2f} us a record"
                                                for k, v in out[c.name].items()))
    return out


def bench(events: int, seed: int, repeat: int, progress: Callable[[str], None] | None = None,
          step: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Generate ``events`` records and time every available candidate ``repeat`` times, interleaved.

    ``progress`` gets a line per phase (generation, each timed pass); ``step`` the number of timed passes done.
    Returns the figures (see docs/benchmarks.md).
    """
    say = progress or log.info
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    corpus = generate(events, seed, say)
    say(f"generated {events:,} records in {time.perf_counter() - t0:.1f} s: {dict(corpus.kinds)}")
    present = [c for c in CANDIDATES if available(c)]
    missing = [c.name for c in CANDIDATES if not available(c)]
    prepared: dict[str, tuple[Run, Callable[[Any], list[Verdict]]]] = {}
    edges: dict[str, list[dict[str, Any]]] = {}
    reference = _ours()
    preps: dict[str, Prepare] = {}
    for c in present:
        prep = preps[c.name] = reference if c.name == "ours" else c.make()
        prepared[c.name] = prep(corpus.values, corpus.kafka_us)
        if c.compare and c.name != "ours":
            edges[c.name] = edge_verdicts(prep, reference)
    seconds: dict[str, list[float]] = {c.name: [] for c in present}
    verdicts: dict[str, list[Verdict]] = {}
    done = 0
    for r in range(repeat):
        for c in present:
            run, to_verdicts = prepared[c.name]
            gc.collect()
            t = time.perf_counter()
            result = run()
            s = time.perf_counter() - t
            seconds[c.name].append(s)
            if r == 0:
                verdicts[c.name] = to_verdicts(result)
            del result
            done += 1
            if step is not None:
                step(done)
            say(f"round {r + 1}/{repeat}: {c.name:<18} {events:,} records in {s:6.2f} s ({events / s:,.0f}/s)")
    split = _split(present, preps, corpus, verdicts["ours"], say)
    ours_median = statistics.median(seconds["ours"])
    ours_best = min(seconds["ours"])
    rows = []
    for c in present:
        times = seconds[c.name]
        median, best = statistics.median(times), min(times)
        row: dict[str, Any] = {
            "name": c.name, "version": _version(c.module) if c.module else None, "what": c.what,
            "seconds": [round(t, 3) for t in times],
            "records_per_s_best": round(events / best), "records_per_s_median": round(events / median),
            "us_per_record_median": round(median / events * 1e6, 3),
            "x_ours_median": round(median / ours_median, 2), "x_ours_best": round(best / ours_best, 2),
            "reason": c.reason, "split": split.get(c.name),
        }
        if c.compare and c.name != "ours":
            row["agreement"] = _agreement(corpus.values, verdicts["ours"], verdicts[c.name])
        rows.append(row)
    rejected = sum(v is not None for v in verdicts["ours"])
    by_reason = Counter(v[0] for v in verdicts["ours"] if v is not None)
    result = {
        "events": events, "seed": seed, "repeat": repeat, "mix": {"late": LATE, "dup": DUP, "bad": BAD},
        "kinds": dict(corpus.kinds), "rejected_by_ours": rejected, "ours_reasons": dict(by_reason),
        "cpus": os.cpu_count(), "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "not_installed": missing, "validators": rows, "edge_cases": edges,
    }
    result["verdict"] = verdict(result)
    return result


def verdict(result: dict[str, Any]) -> str:
    """Which maintained validator, if any, is within ``WITHIN`` of ours (median seconds) and agrees with ours on
    every generated record; its edge-case differences are said beside it."""
    libraries = [r for r in result["validators"] if "agreement" in r and r["name"] != "ours_check_records"]
    if not libraries:
        return "no maintained validator measured: ours stays"

    def edge_note(name: str) -> str:
        rows = result["edge_cases"].get(name, [])
        differ = [e["case"] for e in rows if not e["same_valid"]]
        return (f"and on all {len(rows)} edge cases" if not differ else
                f"but not on {len(differ)} of {len(rows)} edge cases ({'; '.join(differ)})")

    fits = [r for r in libraries if r["x_ours_median"] <= WITHIN and r["agreement"]["disagreements"] == 0]
    if fits:
        return "; ".join(f"{r['name']} takes {r['x_ours_median']}x ours' time (median; limit {WITHIN}x) and agrees on "
                         f"every generated record {edge_note(r['name'])}" for r in fits)
    closest = min(libraries, key=lambda r: r["x_ours_median"])
    return (f"ours stays: the closest maintained validator, {closest['name']}, takes {closest['x_ours_median']}x "
            f"ours' time (median; limit {WITHIN}x) with {closest['agreement']['disagreements']} verdict "
            "disagreement(s)")
