"""Data-quality suites: one file per table in ``expectations/<db>.<table>.yml`` (or ``.json``), reviewed like code.

A suite file::

    table: silver.orders
    row_keys: [order_id]          # identify a row: needed for `quarantine` (which rows move)
    expectations:
      - name: order_id_unique     # optional, unique in the file; default: type + column(s)
        type: expect_column_values_to_be_unique     # a GX Core 1.x expectation type
        kwargs: {column: order_id}
        severity: block           # warn | quarantine | block

A table the registry (:mod:`spark_jobs.contracts.tables`) holds a schema for gets its column and type checks from
it (``columns``, ``type:<column>``, all ``block``: :func:`schema_expectations`); its file holds the business rules.

Severities: ``warn`` records the result only; ``quarantine`` moves the failing
rows out of what is published (row-level expectations only: column/pair/
multicolumn map expectations, or ``unexpected_rows_expectation`` whose query
returns the ``row_keys`` columns); ``block`` fails the publishing step.

String kwargs may hold placeholders filled at validation time (GX itself fills
``{batch}``, the validated frame, in ``unexpected_rows_query``):
``{table:<db>.<table>}`` another lake table, ``{interval_start}`` /
``{interval_end}`` / ``{now}`` timestamp expressions (UTC instants),
``{interval_start_date}`` / ``{interval_end_date}`` UTC date literals, and
``{freshness_slo_seconds}`` (the table's freshness SLO: its ``LAKE_DQ_FRESHNESS_TABLES`` entry, else the one
the table registry declares) and ``{settle_seconds}`` (how old a change must be before a cross-table rule
judges it, since topics apply independently: 600 by default, a ``lake_dq_streaming`` run's ``settle_seconds``
param, 0 once the stream is known to be caught up).
Literal braces (regex quantifiers) are doubled, as GX requires: ``{{2,}}``.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from spark_jobs.settings import REPO_ROOT

EXPECTATIONS_DIR = REPO_ROOT / "expectations"
SEVERITIES = ("warn", "quarantine", "block")
SUFFIXES = (".yml", ".yaml", ".json")
CUSTOM_SQL = "unexpected_rows_expectation"

#: Placeholders this module fills before GX sees a query (``batch`` is GX's own).
PLACEHOLDERS = ("interval_start", "interval_end", "interval_start_date", "interval_end_date", "now",
                "freshness_slo_seconds", "settle_seconds")
_TABLE_REF = re.compile(r"\{table:([a-z][a-z0-9_]*\.[a-z][a-z0-9_]*)\}")
_PLACEHOLDER = re.compile(r"(?<!\{)\{(" + "|".join(PLACEHOLDERS) + r")\}(?!\})")
_FIELD = re.compile(r"(?<!\{)\{([^{}]*)\}(?!\})")
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


class SuiteError(ValueError):
    """A suite file cannot be used; the message names the file and the entry."""


@dataclass(frozen=True)
class ExpectationSpec:
    """One expectation of a suite: a GX type, its kwargs and what a failure does."""

    name: str
    type: str
    kwargs: dict[str, Any]
    severity: str
    row_level: bool

    @property
    def tables(self) -> tuple[str, ...]:
        """Other lake tables its kwargs reference (``{table:...}``)."""
        return tuple(sorted({m for v in self.kwargs.values() if isinstance(v, str) for m in _TABLE_REF.findall(v)}))


@dataclass(frozen=True)
class Suite:
    """The expectations of one table, as loaded from ``path``."""

    table: str
    row_keys: tuple[str, ...]
    expectations: tuple[ExpectationSpec, ...]
    path: Path | None = None
    description: str = ""
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.table


@cache
def expectation_classes() -> dict[str, type]:
    """GX Core expectation types (``expect_column_values_to_be_unique`` ...) -> their classes."""
    import great_expectations.expectations as gxe
    from great_expectations.expectations.expectation import Expectation

    out: dict[str, type] = {}
    for attr in dir(gxe):
        cls = getattr(gxe, attr)
        if isinstance(cls, type) and issubclass(cls, Expectation):
            etype = getattr(cls, "expectation_type", None)
            if isinstance(etype, str) and etype:
                out[etype] = cls
    return out


def is_row_level(cls: type) -> bool:
    """Expectations that judge single rows (so failing rows can be quarantined)."""
    from great_expectations.expectations.expectation import (
        ColumnMapExpectation,
        ColumnPairMapExpectation,
        MulticolumnMapExpectation,
    )

    return issubclass(cls, ColumnMapExpectation | ColumnPairMapExpectation | MulticolumnMapExpectation)


def _default_name(etype: str, kwargs: dict[str, Any]) -> str:
    cols = [kwargs[k] for k in ("column", "column_A", "column_B") if isinstance(kwargs.get(k), str)]
    cols += [c for c in kwargs.get("column_list", []) if isinstance(c, str)]
    base = etype.removeprefix("expect_")
    return base + (":" + ",".join(cols) if cols else "")


def _check_placeholders(where: str, value: str) -> None:
    for name in _FIELD.findall(value):
        if name == "batch" or name.startswith("table:") or name in PLACEHOLDERS:
            continue
        raise SuiteError(f"{where}: unknown placeholder {{{name}}}; use {{batch}}, {{table:<db>.<table>}} or one of "
                         f"{', '.join('{' + p + '}' for p in PLACEHOLDERS)} (double literal braces: {{{{2,}}}})")
    for ref in re.findall(r"\{table:([^}]*)\}", value):
        if not _TABLE_REF.fullmatch("{table:" + ref + "}"):
            raise SuiteError(f"{where}: {{table:{ref}}} must name a table as <db>.<table> in lower_snake_case")


def schema_expectations(table: str) -> list[dict[str, Any]]:
    """The column and type checks of ``table``, derived from its schema in the table registry (none for a table
    the registry does not know or holds no schema for): its columns (exactly, or at least them for a table that
    widens: silver CDC), then each column's Spark type; all ``block``."""
    from spark_jobs.contracts.tables import TABLES

    entry = TABLES.get(table)
    if entry is None or entry.schema is None:
        return []
    columns = {"name": "columns", "type": "expect_table_columns_to_match_set", "severity": "block",
               "kwargs": {"column_set": list(entry.schema.names), "exact_match": not entry.columns_may_widen}}
    return [columns, *[{"name": f"type:{f.name}", "type": "expect_column_values_to_be_of_type", "severity": "block",
                        "kwargs": {"column": f.name, "type_": type(f.dataType).__name__}}
                       for f in entry.schema.fields]]


def parse_suite(doc: Any, source: str, expected_table: str | None = None, registry: bool = False) -> Suite:
    """A parsed suite document -> :class:`Suite`, checking every entry; errors name ``source``. ``registry``: put the
    table's column and type checks from its registry schema first (:func:`schema_expectations`; a suite file)."""
    if not isinstance(doc, dict):
        raise SuiteError(f"{source}: a suite is a mapping with keys table, row_keys, expectations")
    unknown = sorted(set(doc) - {"table", "row_keys", "expectations", "description", "meta"})
    if unknown:
        raise SuiteError(f"{source}: unknown key(s) {', '.join(unknown)} (allowed: table, row_keys, expectations, "
                         "description, meta)")
    table = doc.get("table")
    if not isinstance(table, str) or not re.fullmatch(r"[a-z][a-z0-9_]*\.[a-z][a-z0-9_]*", table):
        raise SuiteError(f"{source}: 'table' must be <db>.<table>, got {table!r}")
    if expected_table is not None and table != expected_table:
        raise SuiteError(f"{source}: the file is named for {expected_table} but says table: {table}")
    keys = doc.get("row_keys", [])
    if not isinstance(keys, list) or not all(isinstance(k, str) and k for k in keys):
        raise SuiteError(f"{source}: 'row_keys' must be a list of column names")
    entries = doc.get("expectations")
    if not isinstance(entries, list) or not entries:
        raise SuiteError(f"{source}: 'expectations' must be a non-empty list")
    schema_checks = schema_expectations(table) if registry else []
    declared = {e.get("name") for e in schema_checks}
    clash = [e.get("name") for e in entries if isinstance(e, dict) and e.get("name") in declared]
    if clash:
        raise SuiteError(f"{source}: {', '.join(map(str, clash))}: derived from {table}'s schema in the table registry "
                         "(spark_jobs/contracts/tables.py); remove them from the suite")
    entries = [*schema_checks, *entries]
    classes = expectation_classes()
    specs: list[ExpectationSpec] = []
    seen: set[str] = set()
    for i, entry in enumerate(entries, 1 - len(schema_checks)):
        # Numbered as in the file; the derived checks before them are named by the registry.
        label = f"expectation #{i}" if i > 0 else f"{table}'s registry schema check {entry.get('name')}"
        where = f"{source}: {label}"
        if not isinstance(entry, dict):
            raise SuiteError(f"{where}: must be a mapping with type, kwargs, severity")
        extra = sorted(set(entry) - {"name", "type", "kwargs", "severity", "notes"})
        if extra:
            raise SuiteError(f"{where}: unknown key(s) {', '.join(extra)} (allowed: name, type, kwargs, severity, notes)")
        etype = entry.get("type")
        if not isinstance(etype, str) or etype not in classes:
            near = difflib.get_close_matches(str(etype), list(classes), n=1)
            hint = f"; did you mean {near[0]}?" if near else " (see great_expectations.expectations)"
            raise SuiteError(f"{where}: unknown expectation type {etype!r}{hint}")
        where = f"{source}: {label} ({etype})"
        severity = entry.get("severity")
        if severity not in SEVERITIES:
            raise SuiteError(f"{where}: severity must be one of {', '.join(SEVERITIES)}, got {severity!r}")
        kwargs = entry.get("kwargs", {})
        if not isinstance(kwargs, dict):
            raise SuiteError(f"{where}: kwargs must be a mapping")
        for value in kwargs.values():
            if isinstance(value, str):
                _check_placeholders(where, value)
        cls = classes[etype]
        try:
            cls(**_probe_kwargs(kwargs))
        except Exception as exc:  # pydantic's errors name the field; keep them with the file
            raise SuiteError(f"{where}: GX rejects kwargs {json.dumps(kwargs, default=str)[:300]}: {exc}") from exc
        name = entry.get("name") or _default_name(etype, kwargs)
        if not isinstance(name, str) or name in seen:
            raise SuiteError(f"{where}: name {name!r} is used twice in the suite (give each a distinct 'name')")
        seen.add(name)
        row_level = is_row_level(cls) or etype == CUSTOM_SQL
        if severity == "quarantine":
            if not row_level:
                raise SuiteError(f"{where}: severity quarantine needs a row-level expectation (column map, pair, "
                                 "multicolumn or unexpected_rows_expectation); use warn or block for table-level checks")
            if not keys:
                raise SuiteError(f"{where}: severity quarantine needs the suite's row_keys (which rows to move)")
        specs.append(ExpectationSpec(name=name, type=etype, kwargs=dict(kwargs), severity=severity, row_level=row_level))
    return Suite(table=table, row_keys=tuple(keys), expectations=tuple(specs), description=str(doc.get("description", "")),
                 meta=dict(doc.get("meta") or {}))


def _probe_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Kwargs with our placeholders filled by dummies, so GX can check the rest at load time."""
    out: dict[str, Any] = {}
    for k, v in kwargs.items():
        if isinstance(v, str):
            v = _TABLE_REF.sub(lambda m: m.group(1), v)
            v = _PLACEHOLDER.sub("0", v)
        out[k] = v
    return out


def suite_path(table: str, directory: Path | None = None) -> Path:
    """The file holding ``table``'s suite (the first of ``.yml``, ``.yaml``, ``.json`` that exists)."""
    folder = directory or EXPECTATIONS_DIR
    for suffix in SUFFIXES:
        path = folder / f"{table}{suffix}"
        if path.is_file():
            return path
    raise SuiteError(f"no suite for {table}: expected {folder / (table + '.yml')} (or .json)")


def load_suite_file(path: Path) -> Suite:
    """Read and check one suite file."""
    text = path.read_text(encoding="utf-8")
    try:
        doc = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise SuiteError(f"{path}: not valid {'JSON' if path.suffix == '.json' else 'YAML'}: {exc}") from exc
    stem = path.name[: -len(path.suffix)]
    suite = parse_suite(doc, str(path), expected_table=stem, registry=True)
    return Suite(table=suite.table, row_keys=suite.row_keys, expectations=suite.expectations, path=path,
                 description=suite.description, meta=suite.meta)


def load_suite(table: str, directory: Path | None = None) -> Suite:
    """The suite of ``table`` from ``expectations/``."""
    return load_suite_file(suite_path(table, directory))


def suite_files(directory: Path | None = None) -> list[Path]:
    folder = directory or EXPECTATIONS_DIR
    return sorted(p for p in folder.iterdir() if p.suffix in SUFFIXES and p.is_file()) if folder.is_dir() else []


def load_all(directory: Path | None = None) -> dict[str, Suite]:
    """Every suite in ``expectations/``, by table."""
    suites: dict[str, Suite] = {}
    for path in suite_files(directory):
        suite = load_suite_file(path)
        if suite.table in suites:
            raise SuiteError(f"{path}: a second suite for {suite.table} (one file per table)")
        suites[suite.table] = suite
    return suites


def fill(value: str, params: dict[str, str], tables: dict[str, str] | None = None) -> str:
    """Fill ``{table:...}`` and our placeholders in ``value``; ``{batch}`` and doubled braces are left for GX."""
    names = tables or {}
    value = _TABLE_REF.sub(lambda m: names.get(m.group(1), m.group(1)), value)
    return _PLACEHOLDER.sub(lambda m: params[m.group(1)], value)
