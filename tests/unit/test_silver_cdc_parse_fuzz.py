"""Property-based fuzzing of the CDC parse (issue 32): Debezium-shaped records of random types, sizes, depths,
numbers (past 2^63, NaN, infinities), column names (reserved, unicode, lone surrogates), missing and extra envelope
fields, non-JSON bytes and tombstones never raise; each record is a change whose values equal the input or a
reject with a reason; tombstones are counted; in = changes + rejects + tombstones.

The pure ``mapInArrow`` body (``parse_batches``) is fuzzed with many examples; one generated batch also runs
through the real ``mapInArrow`` on local Spark (``parse_tables_frame``) and must give the same rows.
"""

from __future__ import annotations

import math
from typing import Any

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spark_jobs.silver.cdc_parse import parse_batches, parse_output_schema
from tests.cdc_fuzz import FORGED_PREFIX, Fuzzed, record, sample, wild_record
from tests.unit.cdc_records import KAFKA_TS, UTC_US

TOPIC = "shop.public.fuzzed"
KEYS = ["id"]
#: A table with every column type the parse supports.
ROWS = pa.schema([("id", pa.int64()), ("s", pa.string()), ("i8", pa.int8()), ("i16", pa.int16()), ("i32", pa.int32()),
                  ("b", pa.bool_()), ("f32", pa.float32()), ("f64", pa.float64()), ("dec", pa.decimal128(10, 2)),
                  ("ts", UTC_US), ("d", pa.date32()), ("bin", pa.binary())])
SILVER = pa.schema([*ROWS, ("_op", pa.string()), ("_snapshot_rank", pa.int32()), ("_commit_lsn", pa.int64()),
                    ("_change_lsn", pa.int64()), ("_source_ts", UTC_US), ("_extra", pa.string())])
REFUSED = (f"{FORGED_PREFIX}a", f"{FORGED_PREFIX}b")


def _out() -> pa.Schema:
    from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema

    return to_arrow_schema(parse_output_schema(from_arrow_schema(SILVER)))


OUT = _out()


def raw(records: list[tuple[bytes | None, bytes | None]]) -> pa.Table:
    return pa.table({"key": pa.array([k for k, _ in records], pa.binary()),
                     "value": pa.array([v for _, v in records], pa.binary()),
                     "topic": pa.array([TOPIC] * len(records), pa.string()),
                     "partition": pa.array([0] * len(records), pa.int32()),
                     "offset": pa.array(range(len(records)), pa.int64()),
                     "kafka_timestamp": pa.array([KAFKA_TS] * len(records), UTC_US)})


def parse_rows(records: list[tuple[bytes | None, bytes | None]]) -> list[dict[str, Any]]:
    batches = list(parse_batches(iter(raw(records).to_batches()), SILVER, OUT, KEYS, REFUSED))
    rows: list[dict[str, Any]] = pa.Table.from_batches(batches, schema=OUT).to_pylist()
    return rows


def same(a: Any, b: Any) -> bool:
    return (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b)) or a == b


def check(fuzzed: list[Fuzzed], rows: list[dict[str, Any]]) -> None:
    """Every record accounted for as its kind says; good values equal the input."""
    by_offset = {r["_offset"]: r for r in rows}
    assert len(by_offset) == len(rows), "a record gave two rows"
    tombstones = [i for i, f in enumerate(fuzzed) if f.kind == "tombstone"]
    assert len(rows) + len(tombstones) == len(fuzzed)  # in = changes + rejects + tombstones
    for i, f in enumerate(fuzzed):
        if f.kind == "tombstone":
            assert i not in by_offset
            continue
        row = by_offset[i]
        if f.kind == "bad" and not (f.why == "deep" and row["_error"] is None):
            assert isinstance(row["_error"], str) and row["_error"], (f.why, f.value, row)
            assert (row["_value"], row["_key"]) == (f.value, f.key)
            continue
        assert row["_error"] is None, (row["_error"], f.value)
        assert f.expected is not None
        wrong = {c: (row[c], v) for c, v in f.expected.items() if not same(row[c], v)}
        assert not wrong, (wrong, f.value)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(record(ROWS, KEYS, REFUSED), max_size=25))
def test_every_record_is_a_change_equal_to_its_input_or_a_reject_with_a_reason(fuzzed: list[Fuzzed]) -> None:
    check(fuzzed, parse_rows([(f.key, f.value) for f in fuzzed]))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(wild_record(ROWS, KEYS), max_size=25))
def test_records_of_any_shape_never_raise(records: list[tuple[bytes | None, bytes | None]]) -> None:
    rows = parse_rows(records)
    assert len(rows) == sum(1 for _, v in records if v is not None)
    for row in rows:
        assert row["_error"] is None or (isinstance(row["_error"], str) and row["_error"]), row
        assert (row["_error"] is None) == (row["_value"] is None)  # a change has no raw copy, a reject has it


def test_a_generated_batch_through_the_real_map_in_arrow_on_spark(spark: Any) -> None:
    from pyspark.sql.pandas.types import from_arrow_schema

    from spark_jobs.silver.cdc import parse_tables_frame, table_rows

    fuzzed = sample(record(ROWS, KEYS, REFUSED), 150)
    assert {f.kind for f in fuzzed} == {"good", "bad", "tombstone"}
    records = [(f.key, f.value) for f in fuzzed]
    batch = raw(records)
    frame = spark.createDataFrame(batch.to_pandas(), schema=from_arrow_schema(batch.schema))
    silver = from_arrow_schema(SILVER)
    parsed = parse_tables_frame(frame, [(TOPIC, silver, KEYS)], lambda t: f"no contract for {t}", {TOPIC: REFUSED})
    rows = table_rows(parsed, 0, TOPIC, silver).toArrow().to_pylist()
    check(fuzzed, rows)
    # The same rows as the pure parse (the wide parse also sets _topic on changes; times differ by zone only).
    shown = [*SILVER.names, "_offset", "_extra_names", "_error", "_key", "_value"]

    def comparable(rs: list[dict[str, Any]]) -> list[list[Any]]:
        return [[r[c] if not isinstance(r[c], float) or not math.isnan(r[c]) else "nan" for c in shown]
                for r in sorted(rs, key=lambda r: r["_offset"])]

    assert comparable(rows) == comparable(parse_rows(records))
