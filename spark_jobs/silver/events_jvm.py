"""The clickstream contract's accept path in the JVM (``LakeEventCheck``, ``infra/stream``), beside the Python one.

:func:`spark_jobs.silver.events.check_events` runs the contract in Python workers (``mapInArrow``). Most records
are valid, and for them the Python work is a JSON parse and a few tests per field: 15-24 us per record in a
Python worker, the largest per-record cost of the events queries (docs/benchmarks.md). Where the session has
``lake-stream.jar`` (the streaming app, the replay, the unit tests' Spark), a JVM UDF first tries to *accept*
each record with the same rules (:func:`rules_json`: the contract's :func:`~spark_jobs.contracts.events_rules.
field_rules`, handed over as JSON, not written again in Java) and returns its typed fields; the Python worker then
only copies those columns (:func:`accepted_columns`) and classifies the rest, rejects and the valid records the
JVM check does not judge, with the Python classifier as before (which keeps the last word on every reject).

Sound, not complete: the JVM check returns a row only when the Python classifier would accept the record with the
same fields (tests/unit/test_silver_events_jvm.py compares both on generated and poison records).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import Column, SparkSession

#: The Spark SQL function name the check is registered under (per session).
FUNCTION = "lake_event_check"
#: The JVM class (``infra/stream/LakeEventCheck.java`` in ``lake-stream.jar``).
JAVA_CLASS = "LakeEventCheck"
#: The column :func:`spark_jobs.silver.events.check_events` hands to the Python workers with the JVM's verdict.
FAST_COLUMN = "_fast"


def return_ddl() -> str:
    """The UDF's struct: the typed fields of an accepted record (``event_us``: its event time in epoch micros)."""
    from spark_jobs.silver.events import PROPERTY_COLUMNS

    props = ", ".join(f"p_{name}: {spark_type}" for name, spark_type, _owner in PROPERTY_COLUMNS)
    return (f"struct<event_id: string, event_type: string, user_id: bigint, session_id: string, event_us: bigint, "
            f"properties: string, {props}, schema_version: int>")


def rules_json() -> str:
    """The contract's rules (and the limits the Python classifier applies) as the JVM check reads them."""
    from spark_jobs.contracts.events import EVENT_TIME_RE, MAX_EVENT_BYTES, MAX_FUTURE_SECONDS
    from spark_jobs.contracts.events_rules import field_rules
    from spark_jobs.silver.events import PROPERTY_COLUMNS
    from spark_jobs.silver.events_arrow import FAST_MAX_CONTAINERS

    rules = field_rules()

    def rule(r: Any) -> dict[str, Any]:
        d = asdict(r)
        d["enum"] = None if r.enum is None else list(r.enum)
        return d

    return json.dumps({
        "max_bytes": MAX_EVENT_BYTES, "max_future_seconds": MAX_FUTURE_SECONDS,
        "max_containers": FAST_MAX_CONTAINERS, "event_time_re": EVENT_TIME_RE.pattern,
        "additional_fields": rules.additional_fields,
        "fields": [rule(r) for r in rules.fields],
        "by_event_type": {etype: [rule(r) for r in rs] for etype, rs in rules.by_event_type.items()},
        "property_columns": [list(c) for c in PROPERTY_COLUMNS],
    })


def jvm_check(spark: SparkSession) -> bool:
    """Register the JVM check on ``spark`` if its class is there; True if it is (now) registered."""
    jvm = getattr(spark, "_jvm", None)
    if jvm is None:  # Spark Connect: no JVM handle here
        return False
    if getattr(spark, "_lake_event_check", False):
        return True
    try:
        cls = jvm.org.apache.spark.util.Utils.classForName(JAVA_CLASS, True, False)
    except Exception:  # noqa: BLE001  (py4j wraps ClassNotFoundException: the jar is not on this session)
        return False
    del cls
    getattr(jvm, JAVA_CLASS).register(spark._jsparkSession, FUNCTION, rules_json(), return_ddl())
    spark._lake_event_check = True  # type: ignore[attr-defined]
    return True


def fast_column(value: Column, kafka_timestamp: Column) -> Column:
    """The JVM verdict of each record: its typed fields when accepted, NULL for the Python classifier."""
    from pyspark.sql import functions as F

    return F.call_function(FUNCTION, value, F.unix_micros(kafka_timestamp))


def accepted_columns(fast: pa.Array) -> dict[str, pa.Array]:
    """The JVM's struct column of accepted records -> the verdict columns of
    :func:`spark_jobs.silver.events_arrow.check_records` (same names and Arrow types)."""
    import pyarrow as pa

    from spark_jobs.silver.events import PROPERTY_COLUMNS

    if isinstance(fast, pa.ChunkedArray):
        fast = fast.combine_chunks()
    n = len(fast)
    field = fast.field
    micros = field("event_us").cast(pa.int64())
    money = pa.decimal128(18, 2)
    arrow_types = {"string": pa.string(), "bigint": pa.int64(), "int": pa.int32(), "decimal(18,2)": money}
    out: dict[str, pa.Array] = {
        "_reason": pa.nulls(n, pa.string()),
        "_error": pa.nulls(n, pa.string()),
        "_event_id": field("event_id").cast(pa.string()),
        "_event_type": field("event_type").cast(pa.string()),
        "_user_id": field("user_id").cast(pa.int64()),
        "_session_id": field("session_id").cast(pa.string()),
        "_event_time": micros.cast(pa.timestamp("us", tz="UTC")),
        "_event_date": micros.cast(pa.timestamp("us")).cast(pa.date32()),  # the UTC day, floored
        "_properties": field("properties").cast(pa.string()),
    }
    for name, spark_type, _owner in PROPERTY_COLUMNS:
        out[f"_p_{name}"] = field(f"p_{name}").cast(arrow_types[spark_type])
    out["_schema_version"] = field("schema_version").cast(pa.int32())
    return out
