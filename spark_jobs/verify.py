"""Compare a silver table with its PostgreSQL source, row for row and column for column.

Grain: one dict per row, column name -> Python value, on both sides:

* :func:`pg_rows` reads a shop table with psycopg2 (ordered by primary key).
* :func:`normalise_spark_rows` brings ``row.asDict()`` rows collected from Spark
  to the same Python types.
* :func:`diff_tables` lists the differences as sentences for a test failure.

Normal form: ``Decimal`` stays ``Decimal`` (exact; ``Decimal('18.90') ==
Decimal('18.9')``), timestamps are aware UTC ``datetime`` values, JSON is the
parsed object (dict/list/...), text and ``char(n)`` are ``str`` as PostgreSQL
returns them (``char(n)`` padded with spaces), NULL is ``None``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from spark_jobs.settings import Settings

MAX_DIFF_LINES = 50
_TABLE_NAME = re.compile(r"^[a-z_][a-z0-9_]*$")


def _utc(value: datetime) -> datetime:
    """Naive datetimes are UTC (our Spark sessions run with ``spark.sql.session.timeZone=UTC``)."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def pg_rows(settings: Settings, table: str) -> list[dict[str, Any]]:
    """Every row of ``public.<table>`` in the shop database, ordered by primary key, normalised."""
    import psycopg2
    from psycopg2 import sql

    if not _TABLE_NAME.match(table):
        raise ValueError(f"{table!r} is not a plain table name (lowercase letters, digits, _)")
    try:
        conn = psycopg2.connect(settings.pg_app_dsn(), connect_timeout=5)
    except psycopg2.OperationalError as exc:
        raise RuntimeError(f"cannot connect to PostgreSQL at {settings.pg_host}:{settings.pg_port}: "
                           f"{str(exc).strip()}; start it with `lake stack up`") from exc
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT a.attname FROM pg_index i "
                "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey) "
                "WHERE i.indrelid = to_regclass(%s) AND i.indisprimary ORDER BY array_position(i.indkey, a.attnum)",
                (f"public.{table}",))
            key = [str(r[0]) for r in cur.fetchall()]
            if not key:
                cur.execute("SELECT to_regclass(%s)", (f"public.{table}",))
                found = cur.fetchone()
                if not found or found[0] is None:
                    raise ValueError(f"no table public.{table} in database {settings.pg_shop_db!r}")
            order = sql.SQL(", ").join(sql.Identifier(k) for k in key) if key else sql.SQL("1")
            cur.execute(sql.SQL("SELECT * FROM public.{} ORDER BY {}").format(sql.Identifier(table), order))
            names = [d.name for d in cur.description or ()]
            rows = [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
        conn.rollback()
    finally:
        conn.close()
    for row in rows:
        for col, value in row.items():
            if isinstance(value, datetime):
                row[col] = _utc(value)
    return rows


def normalise_spark_rows(rows: Iterable[dict[str, Any]], json_columns: Sequence[str]) -> list[dict[str, Any]]:
    """Rows from Spark (``row.asDict()``) in the normal form; ``json_columns`` hold JSON text to parse."""
    out: list[dict[str, Any]] = []
    json_set = set(json_columns)
    for row in rows:
        norm: dict[str, Any] = {}
        for col, value in row.items():
            if isinstance(value, datetime):
                value = _utc(value)
            elif col in json_set and isinstance(value, str | bytes):
                try:
                    value = json.loads(value)
                except ValueError as exc:
                    raise ValueError(f"column {col!r} is not valid JSON: {value[:120]!r}: {exc}") from exc
            norm[col] = value
        out.append(norm)
    return out


def _show(value: Any) -> str:
    text = repr(value)
    if len(text) > 120:
        size = f"{len(value)} chars" if isinstance(value, str) else f"{len(text)} chars as text"
        return f"{text[:80]}... ({size})"
    return text


def _where(a: Any, b: Any) -> str:
    """For long strings: where they start to differ."""
    if isinstance(a, str) and isinstance(b, str) and max(len(a), len(b)) > 80:
        n = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
        return f" (first difference at character {n})"
    return ""


def _same(a: Any, b: Any) -> bool:
    # bool is an int in Python: True == 1 must not pass for a boolean column.
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return bool(a == b)


def _index(rows: list[dict[str, Any]], key: Sequence[str], side: str,
           problems: list[str]) -> dict[tuple[Any, ...], dict[str, Any]]:
    out: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in rows:
        k = tuple(row.get(c) for c in key)
        if k in out:
            problems.append(f"{side} has key {_key_text(key, k)} more than once")
        out[k] = row
    return out


def _key_text(key: Sequence[str], values: tuple[Any, ...]) -> str:
    return "(" + ", ".join(f"{c}={v!r}" for c, v in zip(key, values, strict=True)) + ")"


def _sort_key(k: tuple[Any, ...]) -> tuple[tuple[int, str, Any], ...]:
    # None-safe, type-safe ordering for the report (keys are usually ints or strings).
    return tuple((0, "", v) if isinstance(v, int | float) and not isinstance(v, bool) else (1, repr(v), 0) for v in k)


def diff_tables(expected: list[dict[str, Any]], actual: list[dict[str, Any]], key: Sequence[str],
                columns: Sequence[str]) -> list[str]:
    """Differences between ``expected`` (the source) and ``actual`` (silver), keyed by ``key``.

    Returns one human-readable line per missing key, extra key and differing
    column (with both values); empty when equal. At most ``MAX_DIFF_LINES``
    lines, the last one saying how many more were left out.
    """
    if not key:
        raise ValueError("key must name at least one column")
    problems: list[str] = []
    exp = _index(expected, key, "expected", problems)
    act = _index(actual, key, "actual", problems)
    for k in sorted(exp.keys() | act.keys(), key=_sort_key):
        where = _key_text(key, k)
        if k not in act:
            problems.append(f"missing {where}: in expected, not in actual")
            continue
        if k not in exp:
            problems.append(f"extra {where}: in actual, not in expected")
            continue
        e, a = exp[k], act[k]
        for col in columns:
            if col not in a:
                problems.append(f"{where} {col}: column missing in actual (expected {_show(e.get(col))})")
            elif col not in e:
                problems.append(f"{where} {col}: column missing in expected (actual {_show(a[col])})")
            elif not _same(e[col], a[col]):
                problems.append(f"{where} {col}: expected {_show(e[col])}, actual {_show(a[col])}{_where(e[col], a[col])}")
    if len(problems) > MAX_DIFF_LINES:
        rest = len(problems) - (MAX_DIFF_LINES - 1)
        problems = [*problems[:MAX_DIFF_LINES - 1], f"... and {rest} more differences"]
    return problems


def verify_cdc(settings: Settings) -> dict[str, list[str]]:
    """Compare every silver CDC table with its PostgreSQL source, column by column.

    Columns compared: every column PostgreSQL has (so a column added in the
    source must have reached silver). Returns differences per silver table;
    all lists empty means silver equals the source.
    """
    from spark_jobs.contracts.shop import CDC_TABLES
    from spark_jobs.session import connect_session

    # The stack's Spark Connect server, like `lake gold build`: a client costs ~1 s, a JVM of its own ~20 s
    # (the kill tests verify a dozen times per run).
    spark = connect_session(settings)
    out: dict[str, list[str]] = {}
    for contract in CDC_TABLES.values():
        expected = pg_rows(settings, contract.table)
        pg_columns = _pg_columns(settings, contract.table)
        silver = spark.table(contract.silver)
        missing = [c for c in pg_columns if c not in silver.columns]
        if missing:
            out[contract.silver] = [f"silver lacks column(s) {missing} that PostgreSQL has"]
            continue
        json_cols = [c for c, t in pg_columns.items() if t in ("json", "jsonb")]
        actual = normalise_spark_rows((r.asDict() for r in silver.select(*pg_columns).collect()), json_cols)
        out[contract.silver] = diff_tables(expected, actual, list(contract.keys), list(pg_columns))
    return out


def _pg_columns(settings: Settings, table: str) -> dict[str, str]:
    import psycopg2

    with psycopg2.connect(settings.pg_app_dsn(), connect_timeout=5) as conn, conn.cursor() as cur:
        cur.execute("SELECT column_name, data_type FROM information_schema.columns "
                    "WHERE table_schema = 'public' AND table_name = %s ORDER BY ordinal_position", (table,))
        cols = {str(r[0]): str(r[1]) for r in cur.fetchall()}
    conn.close()
    return cols
