"""Clickstream events as landed in bronze -> validated, typed events + rejects (pure Spark SQL, no UDFs).

Applies the contract of :mod:`spark_jobs.contracts.events` (patterns, enums and
limits read from its JSON Schema through ``field_rules``) with built-in
expressions only, so it keeps up with thousands of events per second per core:

* size: ``length(value)`` bytes > ``MAX_EVENT_BYTES`` -> ``oversized``;
* JSON: ``is_valid_utf8`` and ``try_parse_json('[' || value || ',"\\u0000end"]')``.
  Spark's JSON parsers stop after the first value and ignore what follows
  (``{"a":1} xyz`` parses); wrapping the record in an array with a sentinel
  element makes trailing content a parse error or a wrong sentinel. The variant
  parser also rejects duplicate keys and ``NaN``, as the Python side does.
  No value, no object -> ``not_json``;
* presence and JSON type of each field: ``try_variant_get(doc, '$.f', 'variant')``
  is SQL NULL when the key is absent (``missing_field``) and a variant null for
  JSON ``null``; ``schema_of_variant`` gives its JSON type (``STRING``,
  ``BIGINT`` for an integer that fits 64 bits, ``DECIMAL``/``DOUBLE`` for other
  numbers, ``OBJECT<...>``, ``VOID`` for null) -> ``wrong_type``;
* values: ``rlike`` with the schema's patterns, enum/const, lengths, ranges,
  extra top-level keys, a real instant (``try_cast(... as timestamp)``) no more
  than ``MAX_FUTURE_SECONDS`` after the Kafka timestamp -> ``invalid_value``.

Known differences from the Python classifier: none for the reason code on the
parity corpus (tests/unit/test_events_parse.py). Lone UTF-16 surrogates
(``"\\ud800"``) are valid in both but Spark stores them as ``?``; a record that
appends the exact sentinel (``,"\\u0000end"]...``) after its object would pass.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BinaryType,
    DecimalType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from spark_jobs.contracts.events import (
    INVALID_VALUE,
    MAX_EVENT_BYTES,
    MAX_FUTURE_SECONDS,
    MISSING_FIELD,
    NOT_JSON,
    OVERSIZED,
    WRONG_TYPE,
    ContractRules,
    FieldRule,
    field_rules,
)

MONEY = DecimalType(18, 2)

#: Columns of the rejects frame (-> ``quarantine.events``).
REJECT_SCHEMA = StructType(
    [
        StructField("raw_key", BinaryType()),
        StructField("raw_value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("kafka_timestamp", TimestampType()),
        StructField("reason", StringType()),
        StructField("error", StringType()),
    ]
)

#: Typed property columns of the valid frame: (column, Spark type, event type that carries it).
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

_SENTINEL = "\u0000end"
_SENTINEL_JSON = ',"\\u0000end"]'
_INTEGER_TYPES = ("TINYINT", "SMALLINT", "INT", "BIGINT")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DOC = "_doc"


def _json_path(*names: str) -> str:
    for n in names:
        if not _NAME.fullmatch(n):
            raise ValueError(f"field name {n!r}: only [A-Za-z_][A-Za-z0-9_]* names are supported in the Spark checks")
    return "$." + ".".join(names)


def _quote(value: object) -> str:
    return str(value).replace("'", "\\'")


class _Field:
    """Column expressions for one contract field at ``path`` inside the parsed document."""

    def __init__(self, rule: FieldRule, *path: str) -> None:
        self.rule = rule
        self.label = ".".join(path)
        self.path = _json_path(*path)
        self.key = "_f_" + "__".join(path) + "_" + rule.json_type
        self.variant = F.col(self.key + "_v")
        self.json_type = F.col(self.key + "_t")
        self.present = self.variant.isNotNull()

    def staging(self) -> list[Column]:
        """Columns computed once per row (variant, JSON type, scalar value); the checks only reference them."""
        v = F.try_variant_get(F.col(_DOC), self.path, "variant")
        cols = [v.alias(self.key + "_v"), F.schema_of_variant(v).alias(self.key + "_t")]
        if self.rule.json_type == "string":
            cols.append(F.try_variant_get(v, "$", "string").alias(self.key + "_s"))
        elif self.rule.json_type == "integer":
            cols.append(F.try_variant_get(v, "$", "bigint").alias(self.key + "_n"))
        return cols

    def type_ok(self) -> Column:
        t = self.rule.json_type
        if t == "string":
            return self.json_type == "STRING"
        if t == "integer":
            return self.json_type.isin(*_INTEGER_TYPES)
        if t == "object":
            return self.json_type.startswith("OBJECT")
        return F.lit(True)  # "any": present is enough

    def string(self) -> Column:
        if self.rule.json_type != "string":
            raise ValueError(f"{self.label} is not a string field")
        return F.col(self.key + "_s")

    def integer(self) -> Column:
        if self.rule.json_type != "integer":
            raise ValueError(f"{self.label} is not an integer field")
        return F.col(self.key + "_n")

    def value_problems(self) -> list[tuple[Column, Column]]:
        """``(broken, detail)`` per value rule; only meaningful where the type is right."""
        r = self.rule
        out: list[tuple[Column, Column]] = []
        if r.json_type == "string":
            s = self.string()
            shown = F.concat(F.lit("'"), F.substring(s, 1, 80), F.lit("'"))
            if r.enum is not None:
                out.append((~s.isin(*r.enum), F.concat(F.lit(f"{self.label}: "), shown,
                                                        F.lit(f" is not one of {list(r.enum)}"))))
            if r.const is not None:
                out.append((s != F.lit(r.const), F.concat(F.lit(f"{self.label}: "), shown,
                                                          F.lit(f" is not {r.const!r}"))))
            if r.min_length is not None:
                out.append((F.length(s) < r.min_length,
                            F.lit(f"{self.label}: shorter than {r.min_length} character(s)")))
            if r.max_length is not None:
                out.append((F.length(s) > r.max_length,
                            F.concat(F.lit(f"{self.label}: longer than {r.max_length} characters (length "),
                                     F.length(s).cast("string"), F.lit(")"))))
            if r.pattern is not None:
                out.append((~s.rlike(r.pattern), F.concat(F.lit(f"{self.label}: "), shown,
                                                          F.lit(f" does not match the pattern {r.pattern}"))))
        elif r.json_type == "integer":
            n = self.integer()
            if r.const is not None:
                out.append((n != F.lit(r.const), F.concat(F.lit(f"{self.label}: "), n.cast("string"),
                                                          F.lit(f" is not {r.const!r}"))))
            if r.minimum is not None:
                out.append((n < F.lit(r.minimum), F.concat(F.lit(f"{self.label}: "), n.cast("string"),
                                                           F.lit(f" is less than the minimum of {r.minimum}"))))
            if r.maximum is not None:
                out.append((n > F.lit(r.maximum), F.concat(F.lit(f"{self.label}: "), n.cast("string"),
                                                           F.lit(f" is greater than the maximum of {r.maximum}"))))
        return out


def _first(pairs: list[tuple[Column, Column]]) -> tuple[Column, Column]:
    """``(any condition holds, detail of the first that holds)``."""
    if not pairs:
        return F.lit(False), F.lit(None).cast("string")
    any_ = F.lit(False)
    for cond, _ in pairs:
        any_ = any_ | F.coalesce(cond, F.lit(False))
    detail = F.coalesce(*[F.when(cond, text) for cond, text in pairs])
    return any_, detail


def check_events(bronze: DataFrame, rules: ContractRules | None = None) -> DataFrame:
    """Bronze rows + ``_reason`` (NULL when valid) and ``_error`` + the parsed fields; see :func:`parse_events`.

    Grain: one row per input row. Persist the result to split it with
    :func:`split_checked` without parsing twice.
    """
    rules = rules or field_rules()
    text = F.col("value").cast("string")
    wrapped = F.try_parse_json(F.concat(F.lit("["), text, F.lit(_SENTINEL_JSON)))
    staged = bronze.select(
        "*",
        F.length("value").alias("_size"),
        F.is_valid_utf8(text).alias("_utf8"),
        wrapped.alias("_wrapped"),
    )
    whole = (F.col("_wrapped").isNotNull()
             & (F.try_variant_get("_wrapped", "$[1]", "string") == F.lit(_SENTINEL))
             & F.try_variant_get("_wrapped", "$[2]", "variant").isNull())
    staged = staged.select("*", F.when(whole, F.try_variant_get("_wrapped", "$[0]", "variant")).alias(_DOC))
    staged = staged.select("*", F.map_keys(F.try_variant_get(F.col(_DOC), "$", "map<string,variant>")).alias("_keys"))
    is_object = F.col("_keys").isNotNull()

    top = {r.name: _Field(r, r.name) for r in rules.fields}
    prop_fields = {(etype, r.name): _Field(r, "properties", r.name)
                   for etype, prop_rules in rules.by_event_type.items() for r in prop_rules}
    by_path = {f.key: f for f in [*top.values(), *prop_fields.values()]}  # one staging set per path
    staged = staged.select("*", *[c for f in by_path.values() for c in f.staging()])
    missing: list[tuple[Column, Column]] = []
    wrong: list[tuple[Column, Column]] = []
    invalid: list[tuple[Column, Column]] = []

    def add(field: _Field, when: Column | None = None) -> None:
        gate = F.lit(True) if when is None else when
        if field.rule.required:
            missing.append((gate & ~field.present, F.lit(f"{field.label}: required field is missing")))
        wrong.append((gate & field.present & ~field.type_ok(),
                      F.concat(F.lit(f"{field.label}: expected {field.rule.json_type}, got "),
                               F.lower(F.split(field.json_type, "<")[0]))))
        typed_ok = gate & field.present & field.type_ok()
        invalid.extend((typed_ok & cond, detail) for cond, detail in field.value_problems())

    for f in top.values():
        add(f)

    if not rules.additional_fields:
        extra = F.array_sort(F.array_except(F.col("_keys"), F.array(*[F.lit(n) for n in top])))
        invalid.append((F.size(extra) > 0,
                        F.concat(F.get(extra, 0), F.lit(": unexpected field (the contract allows no other fields)"))))

    event_type = top["event_type"]
    properties = top["properties"]
    props_ok = properties.present & properties.type_ok()
    for etype, prop_rules in rules.by_event_type.items():
        applies = event_type.present & event_type.type_ok() & (event_type.string() == F.lit(etype)) & props_ok
        for r in prop_rules:
            add(prop_fields[(etype, r.name)], applies)

    ev_time = top["event_time"]
    ev_text = ev_time.string()
    ts = ev_text.try_cast(TimestampType())
    time_shape_ok = ev_time.present & ev_time.type_ok() & ev_text.rlike(ev_time.rule.pattern or ".")
    invalid.append((time_shape_ok & ts.isNull(),
                    F.concat(F.lit("event_time: '"), ev_text, F.lit("' is not a real date and time"))))
    too_far = ts > F.col("kafka_timestamp") + F.expr(f"INTERVAL {MAX_FUTURE_SECONDS} SECONDS")
    invalid.append((time_shape_ok & ts.isNotNull() & too_far,
                    F.concat(F.lit("event_time: "), ev_text,
                             F.lit(f" is more than {MAX_FUTURE_SECONDS} s after the record's Kafka timestamp "),
                             F.col("kafka_timestamp").cast("string"), F.lit(" (clock skew?)"))))

    any_missing, missing_detail = _first(missing)
    any_wrong, wrong_detail = _first(wrong)
    any_invalid, invalid_detail = _first(invalid)
    not_json_detail = (
        F.when(~F.col("_utf8"), F.lit("value is not UTF-8"))
        .when(F.col(_DOC).isNull(), F.lit("value is not JSON (malformed, truncated, trailing content, "
                                            "duplicate keys or NaN)"))
        .otherwise(F.concat(F.lit("value is JSON but not an object (got "),
                            F.lower(F.split(F.schema_of_variant(F.col(_DOC)), "<")[0]), F.lit(")")))
    )
    reason = (
        F.when(F.col("value").isNull(), F.lit(NOT_JSON))
        .when(F.col("_size") > MAX_EVENT_BYTES, F.lit(OVERSIZED))
        .when(~F.col("_utf8") | ~is_object, F.lit(NOT_JSON))
        .when(any_missing, F.lit(MISSING_FIELD))
        .when(any_wrong, F.lit(WRONG_TYPE))
        .when(any_invalid, F.lit(INVALID_VALUE))
    )
    # Optimizer barrier. A filter on ``_reason`` (split_checked) is otherwise pushed down through these
    # projections with every column reference replaced by its definition, which re-parses the JSON once per
    # reference (~1000 times a row). A projection holding a nondeterministic expression is never pushed
    # through; ``spark_partition_id() >= 0`` is always true and costs nothing.
    barrier = F.spark_partition_id() >= 0
    staged = staged.select("*", F.when(barrier, reason).alias("_reason"))
    code = F.col("_reason")
    # Details only for rejected rows (CASE is lazy), from the code computed once above.
    error = (
        F.when(code.isNull(), F.lit(None).cast("string"))
        .when(F.col("value").isNull(), F.lit("record has no value (tombstone)"))
        .when(code == OVERSIZED,
              F.concat(F.lit("value is "), F.col("_size").cast("string"),
                       F.lit(f" bytes, more than the {MAX_EVENT_BYTES} allowed")))
        .when(code == NOT_JSON, not_json_detail)
        .when(code == MISSING_FIELD, missing_detail)
        .when(code == WRONG_TYPE, wrong_detail)
        .otherwise(invalid_detail)
    )

    event_type_text = event_type.string()

    def prop(name: str, spark_type: str, owner: str) -> Column:
        pf = prop_fields.get((owner, name))
        if pf is None:
            raise ValueError(f"the contract has no property {name!r} for event type {owner!r}")
        raw = pf.integer() if pf.rule.json_type == "integer" else pf.string()
        return F.when(event_type_text == F.lit(owner), raw.try_cast(spark_type))

    return staged.select(
        "*",
        error.alias("_error"),
        top["event_id"].string().alias("_event_id"),
        event_type_text.alias("_event_type"),
        top["user_id"].integer().alias("_user_id"),
        top["session_id"].string().alias("_session_id"),
        ts.alias("_event_time"),
        F.substring(ev_text, 1, 10).try_cast("date").alias("_event_date"),
        F.to_json(properties.variant).alias("_properties"),
        *[prop(name, t, owner).alias(f"_p_{name}") for name, t, owner in PROPERTY_COLUMNS],
        top["schema_version"].integer().try_cast("int").alias("_schema_version"),
    )


def split_checked(checked: DataFrame, keep: Sequence[str] = ()) -> tuple[DataFrame, DataFrame]:
    """:func:`check_events` output -> ``(valid, rejects)`` as documented in :func:`parse_events`.

    ``keep``: further columns of ``checked`` carried, as they are, to the end of ``valid``.
    """
    valid = checked.where(F.col("_reason").isNull()).select(
        F.col("_event_id").alias("event_id"),
        F.col("_event_type").alias("event_type"),
        F.col("_user_id").alias("user_id"),
        F.col("_session_id").alias("session_id"),
        F.col("_event_time").alias("event_time"),
        F.col("_event_date").alias("event_date"),
        F.col("_properties").alias("properties"),
        *[F.col(f"_p_{name}").cast(t).alias(name) for name, t, _ in PROPERTY_COLUMNS],
        F.col("_schema_version").alias("schema_version"),
        F.col("topic").alias("_topic"),
        F.col("partition").alias("_partition"),
        F.col("offset").alias("_offset"),
        F.col("kafka_timestamp").alias("_kafka_timestamp"),
        F.col("ingest_time").alias("_ingest_time"),
        *keep,
    )
    rejects = checked.where(F.col("_reason").isNotNull()).select(
        F.col("key").alias("raw_key"),
        F.col("value").alias("raw_value"),
        "topic",
        "partition",
        "offset",
        "kafka_timestamp",
        F.col("_reason").alias("reason"),
        F.col("_error").alias("error"),
    )
    return valid, rejects


def parse_events(bronze: DataFrame, rules: ContractRules | None = None) -> tuple[DataFrame, DataFrame]:
    """Split bronze clickstream records into valid typed events and rejects.

    In: bronze rows (``key`` binary, ``value`` binary, ``topic``, ``partition``
    int, ``offset`` long, ``kafka_timestamp``, ``ingest_time``; other columns
    are ignored). ``rules`` defaults to the current contract.

    Out ``valid`` (grain: one row per valid record; duplicates kept, see
    :func:`dedup_in_batch`): ``event_id``, ``event_type``, ``user_id`` long,
    ``session_id``, ``event_time`` timestamp (the UTC instant), ``event_date``
    (its UTC date), ``properties`` (the JSON object text, keys sorted), the
    typed properties of the event's own type (NULL for other types): ``page``,
    ``product_id`` long, ``quantity`` int, ``price``/``cart_value``/``revenue``
    decimal(18,2) (exact: parsed from the decimal string), ``order_id``,
    ``currency``; ``schema_version`` int; ``_topic``, ``_partition``,
    ``_offset``, ``_kafka_timestamp``, ``_ingest_time``.

    Out ``rejects`` (grain: one row per rejected record; columns as
    ``REJECT_SCHEMA``): raw key and value, coordinates, ``reason`` (one code
    of ``spark_jobs.contracts.events.REASONS``) and ``error`` naming the field.

    Counts reconcile: ``valid + rejects = bronze``. Both frames derive from
    ``bronze``; persist it (or :func:`check_events` and :func:`split_checked`)
    if it is expensive to recompute.
    """
    return split_checked(check_events(bronze, rules))


def dedup_in_batch(valid: DataFrame) -> tuple[DataFrame, DataFrame]:
    """``valid`` events -> ``(first, duplicates)``: per ``event_id`` the lowest ``(_partition, _offset)`` is first.

    Grain and columns unchanged; ``first`` has one row per ``event_id``,
    ``duplicates`` every other copy (re-sends). Only within ``valid``: ids seen
    in earlier batches are the caller's business.
    """
    w = Window.partitionBy("event_id").orderBy(F.col("_partition"), F.col("_offset"))
    ranked = valid.withColumn("_dup_rank", F.row_number().over(w))
    first = ranked.where(F.col("_dup_rank") == 1).drop("_dup_rank")
    duplicates = ranked.where(F.col("_dup_rank") > 1).drop("_dup_rank")
    return first, duplicates
