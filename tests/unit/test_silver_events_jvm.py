"""The JVM accept path (infra/stream/LakeEventCheck.java, silver/events_jvm.py): it accepts only what the Python
classifier accepts, with the same typed fields, and the whole check gives the same rows with it as without it."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import functions as F

from spark_jobs.silver.events import check_events
from spark_jobs.silver.events_arrow import check_records
from spark_jobs.silver.events_jvm import FAST_COLUMN, accepted_columns, fast_column, jvm_check
from tests.unit.event_records import EDGE_CASES, EVENT_ID, KAFKA_TS, enc, event, generated_corpus, with_props
from tests.unit.test_silver_events_arrow import mutations, raw_table

# Encodings the generated corpus and the mutations do not produce: each is valid JSON the Python parse reads in
# its own way (or rejects), so the JVM must either agree exactly or leave the record to Python.
ODD: list[bytes] = [
    b'{"event_id":"%s","event_id":"%s","event_type":"page_view","user_id":1,"session_id":"s",'
    b'"event_time":"2026-11-22T04:59:59Z","properties":{"page":"/"},"schema_version":1}' % ((EVENT_ID.encode(),) * 2),
    b"\xef\xbb\xbf" + enc(event()),  # a BOM
    b" \n\t" + enc(event()) + b" \r\n",  # JSON whitespace around the value
    enc(event()) + b" x",  # trailing text
    enc(event()) + enc(event()),  # two values
    json.dumps(event(), indent=2).encode(),  # not compact
    json.dumps(with_props("page_view", page="/é\u2028\x7f"), ensure_ascii=False).encode(),
    json.dumps(with_props("page_view", page="/é\u2028"), ensure_ascii=True).encode(),  # \\u escapes
    enc(with_props("page_view", page="/\n")), enc(with_props("page_view", page="/\ud83d\ude00")),
    json.dumps(with_props("page_view", page="/\U0001f600"), ensure_ascii=False).encode(),
    enc(with_props("page_view", z="\x01", a="\\\"")), enc(with_props("page_view", n=None, f=1.5, o={"a": 1})),
    enc(with_props("page_view", big=2**64, neg=-(2**63))), enc(with_props("page_view", **{"é": 1, "\U0001f600": 2})),
    enc(event(user_id=1.0)), enc(event(user_id=10**30)), enc(event(schema_version=True)),
    enc(with_props("add_to_cart", quantity=2**31)), enc(with_props("add_to_cart", price="0012.30")),
    enc(with_props("purchase", revenue="1234567890123456.99")), enc(with_props("purchase", revenue="1e3")),
    enc(event(event_time="2026-11-22T04:59:59.1234567Z")), enc(event(event_time="2024-02-29T23:59:59.000001Z")),
    enc(event(event_time="1969-12-31T23:59:59.5Z")), enc(event(event_time="2026-11-22T05:05:00.250001Z")),
    enc(event(event_time="2026-11-22T05:05:00.25Z")), enc(event(session_id="x" * 64)),
    enc(event(session_id="é" * 64)), enc(event(session_id="\U0001f600" * 33)),
    b'{"event_id":"' + EVENT_ID.encode() + b'","event_type":"page_view","user_id":01,"session_id":"s",'
    b'"event_time":"2026-11-22T04:59:59Z","properties":{"page":"/"},"schema_version":1}',
    b'{"event_id":"' + EVENT_ID.encode() + b'","event_type":"page_view","user_id":1,"session_id":"s",'
    b'"event_time":"2026-11-22T04:59:59Z","properties":{"page":"/"},"schema_version":1,}',
    b'{"event_id":"' + EVENT_ID.encode() + b'","event_type":"page_view","user_id":1,"session_id":"s",'
    b'"event_time":"2026-11-22T04:59:59Z","properties":{"page":"/"},"schema_version":1.0}',
    b'{"event_id":"' + EVENT_ID.encode() + b'","event_type":"page_view","user_id":1,"session_id":"s",'
    b'"event_time":"2026-11-22T04:59:59Z","properties":{"page":"/","page":"/x"},"schema_version":1}',
    b'{"event_id":"' + EVENT_ID.encode() + b'","event_type":"page_view","user_id":1,"session_id":"s\xed\xa0\x80",'
    b'"event_time":"2026-11-22T04:59:59Z","properties":{"page":"/"},"schema_version":1}',
    b'{"event_id":"' + EVENT_ID.encode() + b'","event_type":"page_view","user_id":1,"session_id":"s\xc0\xaf",'
    b'"event_time":"2026-11-22T04:59:59Z","properties":{"page":"/"},"schema_version":1}',
]


def all_values() -> list[bytes | None]:
    values: list[bytes | None] = [v for _, v in generated_corpus(800)]
    values += [v for _, v, _ in EDGE_CASES] + [enc(d) for d in mutations()] + list[bytes | None](ODD)
    return values


def verdicts(spark: Any, values: list[bytes | None]) -> list[Any]:
    """The JVM check's struct per value (None: left to Python), in input order."""
    assert jvm_check(spark), "lake-stream.jar is not on the unit tests' Spark (tests/conftest.py)"
    rows = [(i, v, KAFKA_TS) for i, v in enumerate(values)]
    frame = spark.createDataFrame(rows, "i int, value binary, kafka_timestamp timestamp")
    got = frame.select("i", fast_column(F.col("value"), F.col("kafka_timestamp")).alias(FAST_COLUMN)).collect()
    return [r[FAST_COLUMN] for r in sorted(got, key=lambda r: r["i"])]


def test_jvm_accepts_only_what_python_accepts_with_the_same_fields(spark: Any) -> None:
    values = all_values()
    fast = verdicts(spark, values)
    python = check_records(raw_table(values)).to_pylist()
    accepted = [i for i, f in enumerate(fast) if f is not None]
    wrong = {i: python[i]["_reason"] for i in accepted if python[i]["_reason"] is not None}
    assert wrong == {}, [values[i] for i in wrong]
    # The accepted rows' columns, built as the Python worker builds them, equal the Python classifier's.
    table = raw_table([values[i] for i in accepted])
    built = pa.table(accepted_columns(pa.array([fast[i].asDict() for i in accepted]))).to_pylist()
    want = check_records(table).to_pylist()
    differ = [(values[i], {k: (b[k], w[k]) for k in b if b[k] != w[k]})
              for i, b, w in zip(accepted, built, want, strict=True) if any(b[k] != w[k] for k in b)]
    assert differ == []
    # And it judges enough to matter: every valid generated record, most of the corpus' valid ones.
    generated_valid = [i for i, (kind, _) in enumerate(generated_corpus(800)) if kind in ("valid", "late", "duplicate")]
    assert generated_valid and all(fast[i] is not None for i in generated_valid)
    assert len(accepted) > 300


@pytest.mark.parametrize("kafka_shift_s", [0, -301])
def test_check_events_gives_the_same_rows_with_and_without_the_jvm(spark: Any, kafka_shift_s: int) -> None:
    values = all_values()
    kafka_ts = KAFKA_TS + timedelta(seconds=kafka_shift_s)
    rows = [(b"42", v, "events.clickstream", i % 3, 1000 + i, kafka_ts, i) for i, v in enumerate(values)]
    frame = spark.createDataFrame(rows, "key binary, value binary, topic string, partition int, offset long, "
                                        "kafka_timestamp timestamp, n int").repartition(3)
    with_jvm = sorted(check_events(frame, keep=["n"]).collect(), key=lambda r: r["n"])
    python = check_records(raw_table(values, kafka_ts)).to_pylist()
    assert len(with_jvm) == len(values)
    differ: dict[int, dict[str, Any]] = {}
    for row, want in zip(with_jvm, python, strict=True):
        have = row.asDict()
        for k, v in want.items():
            if isinstance(v, datetime):
                v = v.replace(tzinfo=None)  # collected timestamps are naive, in the session's zone (UTC here)
            if k not in ("kafka_timestamp", "partition", "offset", "key") and have[k] != v:
                differ.setdefault(row["n"], {})[k] = (have[k], v)
    assert differ == {}
