"""Every custom SQL rule of a suite in one Spark job: per rule its unexpected row count and sample rows."""

from __future__ import annotations

import contextlib
import json
import uuid
from datetime import date, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from spark_jobs.quality.outcome import SAMPLE_ROWS
from spark_jobs.quality.suites import ExpectationSpec

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType


#: How the bundled SQL job carries a rule's row as JSON: nulls kept, timestamps to the microsecond with their offset.
_TO_JSON = {"ignoreNullFields": "false", "timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX"}


def _decode(text: str, schema: StructType) -> dict[str, Any]:
    """A row as :func:`_sql_rule_frames` encodes it -> the values ``Row.asDict()`` gives (what GX itself returns)."""
    from pyspark.sql.types import DateType, DecimalType, TimestampType

    row: dict[str, Any] = json.loads(text, parse_float=Decimal)
    out: dict[str, Any] = {}
    for f in schema.fields:
        v = row.get(f.name)
        if v is not None and isinstance(f.dataType, DecimalType):
            v = Decimal(str(v))
        elif isinstance(v, str) and isinstance(f.dataType, TimestampType):
            v = datetime.fromisoformat(v).astimezone().replace(tzinfo=None)  # naive local time, as pyspark's collect
        elif isinstance(v, str) and isinstance(f.dataType, DateType):
            v = date.fromisoformat(v)
        out[f.name] = v
    return out


def _sql_rule_frames(spark: SparkSession, view: str, rules: list[tuple[ExpectationSpec, dict[str, Any]]]
                     ) -> tuple[DataFrame, list[StructType]]:
    """The rows every rule's query returns, tagged (``__dq_rule``: index in ``rules``; ``__dq_row``: the row as
    JSON), and each rule's row schema."""
    from functools import reduce

    from pyspark.sql import functions as F

    frames, schemas = [], []
    for i, (_, kwargs) in enumerate(rules):
        query = str(kwargs["unexpected_rows_query"]).format(batch=view)
        rows = spark.sql(query)
        schemas.append(rows.schema)
        frames.append(rows.select(F.lit(i).alias("__dq_rule"), F.to_json(
            F.struct(*[F.col(f"`{c}`") for c in rows.columns]), _TO_JSON).alias("__dq_row")))
    return reduce(lambda a, b: a.unionByName(b), frames), schemas


def sql_rule_counts(spark: SparkSession, df: DataFrame, rules: list[tuple[ExpectationSpec, dict[str, Any]]]
                    ) -> dict[str, tuple[int, list[dict[str, Any]]] | Exception]:
    """Every custom SQL rule in ONE Spark job: per rule its unexpected row count and up to SAMPLE_ROWS rows.

    GX's ``unexpected_rows_expectation`` runs two jobs per rule (a count, then a fetch of 200 rows). Here the
    rules' rows are tagged and unioned, and one aggregate returns each rule's count and its first rows (ordered
    by their JSON text, so the sample is deterministic). A rule that cannot be planned or run is retried alone;
    its error is its result.
    """
    if not rules:
        return {}
    from pyspark.errors import PySparkException

    view = f"__dq_batch_{uuid.uuid4().hex}"
    df.createOrReplaceTempView(view)
    try:
        return _sql_rule_job(spark, view, rules)
    except PySparkException as exc:
        if len(rules) == 1:
            return {rules[0][0].name: exc}
        out: dict[str, tuple[int, list[dict[str, Any]]] | Exception] = {}
        for rule in rules:
            try:
                out.update(_sql_rule_job(spark, view, [rule]))
            except PySparkException as rule_exc:  # the rule's own error (bad SQL, missing table), reported per rule
                out[rule[0].name] = rule_exc
        return out
    finally:
        with contextlib.suppress(Exception):
            spark.catalog.dropTempView(view)


def _sql_rule_job(spark: SparkSession, view: str, rules: list[tuple[ExpectationSpec, dict[str, Any]]]
                  ) -> dict[str, tuple[int, list[dict[str, Any]]] | Exception]:
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    tagged, schemas = _sql_rule_frames(spark, view, rules)
    per_rule = Window.partitionBy("__dq_rule")
    ranked = (tagged.withColumn("__dq_n", F.count(F.lit(1)).over(per_rule))
              .withColumn("__dq_rn", F.row_number().over(per_rule.orderBy("__dq_row"))))
    found = (ranked.where(F.col("__dq_rn") <= SAMPLE_ROWS).groupBy("__dq_rule")
             .agg(F.max("__dq_n").alias("n"), F.collect_list("__dq_row").alias("rows")).collect())
    out: dict[str, tuple[int, list[dict[str, Any]]] | Exception] = {spec.name: (0, []) for spec, _ in rules}
    for r in found:
        i = int(r["__dq_rule"])
        out[rules[i][0].name] = (int(r["n"]), [_decode(text, schemas[i]) for text in sorted(r["rows"])])
    return out
