"""Run a table's suite with Great Expectations Core on a Spark DataFrame; split, record and report the outcome.

One GX validation per call: an ephemeral context, a Spark datasource holding
the caller's session (classic or Spark Connect), a dataframe asset, a
whole-dataframe batch definition. The work per suite is bounded, whatever the
number of expectations (see :func:`validate_suite`): one GX run for verdicts
only (map expectations' counts bundled in one aggregate job), one Spark job for
all custom SQL rules, and a second GX run, for samples, over the expectations
that failed only. The frame is never persisted here (``persist=False``).

Severities act after the run:

* ``warn``: recorded, nothing else;
* ``quarantine``: the rows a failed row-level expectation flags (GX's own
  unexpected condition on its own domain, or the rows a custom SQL rule
  returns) are identified by the suite's ``row_keys`` and left out of
  ``passed``; ``quarantined`` holds them once each, with the names of the
  expectations they failed. Both stay lazy DataFrames over ``df``, so
  in = passed + quarantined for a deterministic input;
* ``block``: ``blocked`` is set; the caller must not publish. An expectation
  GX could not evaluate (bad column, SQL error) counts as failed, and a
  ``quarantine`` expectation that errored blocks (its rows are unknown).
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import uuid
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from spark_jobs.quality.outcome import EXPECTATIONS_COLUMN, SAMPLE_ROWS, DqBlocked, DqOutcome, ExpectationResult
from spark_jobs.quality.params import SETTLE_SECONDS, query_params
from spark_jobs.quality.sql_rules import sql_rule_counts
from spark_jobs.quality.suites import CUSTOM_SQL, ExpectationSpec, Suite, expectation_classes, fill, load_suite

__all__ = ["EXPECTATIONS_COLUMN", "SETTLE_SECONDS", "DqBlocked", "DqOutcome", "ExpectationResult", "query_params",
           "validate", "validate_suite"]

# GX logs several INFO lines per expectation (decorator registration, default fields): they drowned the task
# logs that must show a failed expectation's table, count and samples.
logging.getLogger("great_expectations").setLevel(logging.WARNING)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from spark_jobs.settings import Settings


def _needs_settings(suite: Suite) -> bool:
    return any("{freshness_slo_seconds}" in v for s in suite.expectations for v in s.kwargs.values()
               if isinstance(v, str))


def _filled(spec: ExpectationSpec, params: dict[str, str], tables: dict[str, str] | None) -> dict[str, Any]:
    return {k: fill(v, params, tables) if isinstance(v, str) else v for k, v in spec.kwargs.items()}


# --------------------------------------------------------------------------- GX


def _expectation(etype: str, kwargs: dict[str, Any]) -> Any:
    """A GX expectation object. GX prints a note to stdout for every SQL rule whose query has no ``{batch}``
    (ours are filled in, or read other tables on purpose): once per construction, ~10 lines per task log."""
    cls = expectation_classes()[etype]
    if "unexpected_rows_query" not in kwargs:
        return cls(**kwargs)
    with contextlib.redirect_stdout(io.StringIO()):
        return cls(**kwargs)


def _gx_suite(suite: Suite, specs: list[tuple[ExpectationSpec, dict[str, Any]]], name: str | None = None) -> Any:
    """A GX ``ExpectationSuite`` of ``specs`` (fresh expectation objects; each carries its name and severity)."""
    import great_expectations as gx

    expectations = [_expectation(spec.type, {**kwargs, "meta": {"dq_name": spec.name, "severity": spec.severity}})
                    for spec, kwargs in specs]
    return gx.ExpectationSuite(name=name or suite.table, expectations=expectations,
                               meta={"source": str(suite.path or "")})


def _gx_objects(spark: SparkSession, suite: Suite, specs: list[tuple[ExpectationSpec, dict[str, Any]]]) -> Any:
    """An ephemeral GX context with ``specs`` bound to a whole-dataframe batch of ``spark``; -> (ctx, bd, vd)."""
    import great_expectations as gx
    from great_expectations.data_context.types.base import (
        DataContextConfig,
        InMemoryStoreBackendDefaults,
        ProgressBarsConfig,
    )

    # No temporary docs site per run (GX's ephemeral default): the file project renders Data Docs.
    ctx = gx.get_context(mode="ephemeral", project_config=DataContextConfig(
        store_backend_defaults=InMemoryStoreBackendDefaults(init_temp_docs_sites=False)))
    ctx.variables.progress_bars = ProgressBarsConfig(globally=False)
    ds = ctx.data_sources.add_spark(name="lake", persist=False)
    # The execution engine runs custom SQL (spark.sql on the view of the batch) in this session: it must be the
    # session the DataFrame lives in. GX would otherwise pick SparkConnectSession/SparkSession.builder.getOrCreate().
    ds._spark = spark
    asset = ds.add_dataframe_asset(name=suite.table.replace(".", "__"))
    bd = asset.add_batch_definition_whole_dataframe("whole")
    gx_suite = ctx.suites.add(_gx_suite(suite, specs))
    vd = ctx.validation_definitions.add(gx.ValidationDefinition(name=f"{suite.table}:whole", data=bd, suite=gx_suite))
    return ctx, bd, vd


def _exception(r: Any) -> str | None:
    info = r.exception_info or {}
    if isinstance(info, dict) and info.get("raised_exception"):
        return str(info.get("exception_message") or "exception")
    if isinstance(info, dict):
        for v in info.values():
            if isinstance(v, dict) and v.get("raised_exception"):
                return str(v.get("exception_message") or "exception")
    return None


def _to_result(table: str, spec: ExpectationSpec, r: Any) -> ExpectationResult:
    res: dict[str, Any] = dict(r.result or {})
    error = _exception(r)
    unexpected: int | None = None
    observed: str | None
    sample: list[Any] = []
    if "unexpected_count" in res:
        unexpected = int(res["unexpected_count"] or 0)
        observed = (f"{unexpected} unexpected of {res.get('element_count')} rows "
                    f"({float(res.get('unexpected_percent') or 0.0):.4g}%)")
        if res.get("partial_unexpected_index_list"):
            sample = list(res["partial_unexpected_index_list"])
        else:
            sample = [{"value": v} for v in res.get("partial_unexpected_list") or []]
    elif spec.type == CUSTOM_SQL:
        unexpected = None if res.get("observed_value") is None else int(res["observed_value"])
        observed = None if unexpected is None else f"{unexpected} unexpected rows"
        sample = list((res.get("details") or {}).get("unexpected_rows") or [])
    elif spec.row_level and r.success and error is None and "mostly" not in spec.kwargs:
        # A passing map expectation validated for its verdict only (BOOLEAN_ONLY): no row failed it.
        unexpected, observed = 0, "0 unexpected"
    else:
        ov = res.get("observed_value")
        observed = None if ov is None else json.dumps(ov, default=str, ensure_ascii=False)[:2000]
    if error is not None:
        observed = observed or "error"
    return ExpectationResult(
        table=table, expectation=spec.name, expectation_type=spec.type, severity=spec.severity,
        success=bool(r.success) and error is None, observed_value=observed, unexpected_count=unexpected,
        unexpected_sample=json.dumps(sample[:SAMPLE_ROWS], default=str, ensure_ascii=False), error=error)


def _map_unexpected(batch: Any, expectation: Any) -> DataFrame:
    """GX's own unexpected rows of a map expectation, lazily: its condition metric applied to its domain."""
    from great_expectations.validator.metric_configuration import MetricConfiguration
    from great_expectations.validator.metrics_calculator import MetricsCalculator
    from pyspark.sql import functions as F

    engine = batch.data.execution_engine
    engine.batch_manager.load_batch_list(batch_list=[batch])
    deps = expectation.get_validation_dependencies(execution_engine=engine)
    wanted = f"{expectation.map_metric}.unexpected_count"
    config = deps.get_metric_configuration(wanted)
    if config is None:
        raise RuntimeError(f"GX gives {expectation.expectation_type} no {wanted} metric: cannot tell which rows fail")
    condition = MetricConfiguration(f"{expectation.map_metric}.condition", config.metric_domain_kwargs,
                                    config.metric_value_kwargs)
    cond, compute_kwargs, accessor_kwargs = MetricsCalculator(
        execution_engine=engine, show_progress_bars=False).get_metric(condition)
    domain = engine.get_domain_records(domain_kwargs=dict(**compute_kwargs, **accessor_kwargs))
    # withColumn, as GX does: some conditions are window expressions (uniqueness).
    frame: DataFrame = domain.withColumn("__dq_unexpected", cond).where(F.col("__dq_unexpected"))
    return frame.drop("__dq_unexpected")


def _split(spark: SparkSession, df: DataFrame, keys: tuple[str, ...], bad: list[tuple[str, DataFrame]]
           ) -> tuple[DataFrame, DataFrame]:
    """``df`` -> (rows whose key is in no ``bad`` frame, rows whose key is, with the expectations they failed)."""
    from functools import reduce

    from pyspark.sql import functions as F

    flagged = reduce(lambda a, b: a.unionByName(b),
                     [frame.select(*keys).withColumn("__dq_name", F.lit(name)) for name, frame in bad])
    per_key = flagged.groupBy(*keys).agg(F.sort_array(F.collect_set("__dq_name")).alias(EXPECTATIONS_COLUMN))
    d, b = df.alias("__dq_d"), per_key.alias("__dq_b")
    on = reduce(lambda x, y: x & y, [F.col(f"__dq_d.`{k}`").eqNullSafe(F.col(f"__dq_b.`{k}`")) for k in keys])
    passed = d.join(b, on, "left_anti")
    quarantined = d.join(b, on, "inner").select("__dq_d.*", F.col(f"__dq_b.{EXPECTATIONS_COLUMN}"))
    return passed, quarantined


def _sql_result(expectation: Any, found: tuple[int, list[dict[str, Any]]] | Exception) -> Any:
    """A rule's verdict as the validation result GX's ``unexpected_rows_expectation`` gives (COMPLETE format)."""
    from great_expectations.core.expectation_validation_result import ExpectationValidationResult

    if isinstance(found, Exception):
        return ExpectationValidationResult(
            success=False, expectation_config=expectation.configuration, result={},
            exception_info={"raised_exception": True, "exception_message": f"{type(found).__name__}: {found}"[:2000],
                            "exception_traceback": None})
    count, rows = found
    return ExpectationValidationResult(
        success=count == 0, expectation_config=expectation.configuration,
        result={"observed_value": count, "details": {"unexpected_rows": rows}},
        exception_info={"raised_exception": False, "exception_message": None, "exception_traceback": None})


def _dq_name(result: Any) -> str:
    return str((result.expectation_config.meta or {}).get("dq_name"))


def validate_suite(spark: SparkSession, df: DataFrame, suite: Suite, *, interval: tuple[datetime, datetime] | None,
                   run_id: str, dag_id: str, task_id: str, settings: Settings | None = None,
                   tables: dict[str, str] | None = None, build_docs: bool = False, render_docs: bool = True,
                   now: datetime | None = None, settle_seconds: int = SETTLE_SECONDS) -> DqOutcome:
    """:func:`validate` with the suite given (tests, ad-hoc suites); ``tables`` renames ``{table:...}`` references.

    Bounded work, whatever the suite's size:

    1. GX validates every expectation but the custom SQL rules in one run with result format ``BASIC`` and no
       samples: the map expectations' unexpected counts are aggregate metrics GX bundles into one Spark job
       (uniqueness adds one), schema expectations read the schema only;
    2. the custom SQL rules run together in one Spark job (:func:`sql_rule_counts`);
    3. only expectations that failed in 1 are validated again by GX, with ``SUMMARY`` results keyed by the
       suite's ``row_keys``, for their sample rows.

    The merged result is one GX validation result (Data Docs) and one :class:`ExpectationResult` per expectation.
    ``build_docs`` also stores the validation in the Data Docs project of ``settings``' state dir and renders its
    page (``render_docs``) or queues it for the stack's ``dq-docs`` service (``render_docs=False``).
    """
    from great_expectations.core.run_identifier import RunIdentifier
    from great_expectations.validator.validation_statistics import calc_validation_statistics

    now = now or datetime.now(UTC)
    if settings is None and _needs_settings(suite):
        from spark_jobs.settings import load_settings

        settings = load_settings()
    params = query_params(suite.table, interval, now, settings, settle_seconds)
    specs = [(spec, _filled(spec, params, tables)) for spec in suite.expectations]
    gx_specs = [(spec, kw) for spec, kw in specs if spec.type != CUSTOM_SQL]
    sql_specs = [(spec, kw) for spec, kw in specs if spec.type == CUSTOM_SQL]
    full_suite = _gx_suite(suite, specs)
    _ctx, bd, vd = _gx_objects(spark, suite, gx_specs)
    present = set(df.columns)
    index_cols = [k for k in suite.row_keys if k in present]

    run_identifier = RunIdentifier(run_name=run_id, run_time=now)
    validation = vd.run(batch_parameters={"dataframe": df}, run_id=run_identifier,
                        result_format={"result_format": "BOOLEAN_ONLY"})
    by_name: dict[str, Any] = {_dq_name(r): r for r in validation.results}

    # Samples only for what failed: GX again, on those expectations alone.
    # (``mostly`` lets an expectation pass with unexpected rows: ask for its count too.)
    resample = [(spec, kw) for spec, kw in gx_specs if not by_name[spec.name].success or "mostly" in kw]
    if resample:
        result_format: dict[str, Any] = {"result_format": "SUMMARY", "partial_unexpected_count": SAMPLE_ROWS}
        if index_cols:
            result_format["unexpected_index_column_names"] = index_cols
        batch = bd.get_batch(batch_parameters={"dataframe": df})
        again = batch.validate(_gx_suite(suite, resample, name=f"{suite.table}:samples"), result_format=result_format)
        by_name.update({_dq_name(r): r for r in again.results})

    found = sql_rule_counts(spark, df, sql_specs)
    for expectation in full_suite.expectations:
        name = str(expectation.meta["dq_name"])
        if name in found:
            by_name[name] = _sql_result(expectation, found[name])

    merged = [by_name[spec.name] for spec, _ in specs]
    stats = calc_validation_statistics(merged)
    validation.results = merged
    validation.success = stats.success
    validation.statistics = {"evaluated_expectations": stats.evaluated_expectations,
                             "successful_expectations": stats.successful_expectations,
                             "unsuccessful_expectations": stats.unsuccessful_expectations,
                             "success_percent": stats.success_percent}
    spec_of = {spec.name: spec for spec, _ in specs}
    results = [_to_result(suite.table, spec_of[_dq_name(r)], r) for r in merged]

    blocked = any(not r.success and (r.severity == "block" or (r.severity == "quarantine" and r.error))
                  for r in results)
    to_quarantine = [r for r in results if not r.success and r.severity == "quarantine" and not r.error]
    passed, quarantined = df, None
    if to_quarantine:
        missing = [k for k in suite.row_keys if k not in present]
        if missing:
            raise ValueError(f"{suite.table}: row_keys {missing} are not columns of the frame: cannot quarantine rows")
        filled_by_name = {spec.name: kw for spec, kw in specs}
        bad: list[tuple[str, DataFrame]] = []
        gx_batch = None
        for r in to_quarantine:
            spec = spec_of[r.expectation]
            if spec.type == CUSTOM_SQL:
                view = f"__dq_{uuid.uuid4().hex}"
                df.createOrReplaceTempView(view)
                query = str(filled_by_name[spec.name]["unexpected_rows_query"]).format(batch=view)
                bad.append((spec.name, spark.sql(query)))
            else:
                if gx_batch is None:
                    gx_batch = bd.get_batch(batch_parameters={"dataframe": df})
                expectation = _expectation(spec.type, filled_by_name[spec.name])
                bad.append((spec.name, _map_unexpected(gx_batch, expectation)))
        passed, quarantined = _split(spark, df, suite.row_keys, bad)

    outcome = DqOutcome(table=suite.table, interval=interval, run_id=run_id, dag_id=dag_id, task_id=task_id,
                        validated_at=now, results=results, passed=passed, quarantined=quarantined, blocked=blocked,
                        row_keys=suite.row_keys)
    if build_docs:
        from spark_jobs.quality import docs

        if settings is None:
            from spark_jobs.settings import load_settings

            settings = load_settings()
        store = docs.build_data_docs if render_docs else docs.store_validation
        outcome.docs_url = store(settings, full_suite, validation, f"{dag_id}.{task_id}")
    return outcome


def validate(spark: SparkSession, df: DataFrame, table: str, *, interval: tuple[datetime, datetime] | None,
             run_id: str, dag_id: str, task_id: str, settle_seconds: int = SETTLE_SECONDS) -> DqOutcome:
    """Validate ``df`` (rows of ``table``, or of its ``interval``) against ``expectations/<table>.yml``.

    Stores the validation for Data Docs (the stack's ``dq-docs`` service renders its page). Writes no table:
    call :func:`write_results` and :func:`write_quarantine`, publish ``passed``
    unless ``blocked``.
    """
    from spark_jobs.settings import load_settings

    return validate_suite(spark, df, load_suite(table), interval=interval, run_id=run_id, dag_id=dag_id,
                          task_id=task_id, settings=load_settings(), build_docs=True, render_docs=False,
                          settle_seconds=settle_seconds)


