"""``lake sql``: statements against the shared catalog, printed for people or scripts."""

from __future__ import annotations

import csv
import io
import json
import sys
from collections.abc import Sequence
from datetime import date, datetime
from decimal import Decimal
from typing import Any

import click

FORMATS = ("table", "csv", "json")


def split_statements(text: str) -> list[str]:
    """Split on ``;`` outside quotes and comments; drop ``--`` comments, the ``;`` and empty statements.

    sqlparse finds the statements: ``'...'`` (with ``''`` or ``\\'`` inside), ``"..."``, backquoted names and
    ``/* */`` comments are whole tokens, and a ``BEGIN ... END`` block (a Spark SQL script) stays one statement.
    Block comments stay in the statement (Spark reads ``/*+ hints */``).
    """
    import sqlparse
    from sqlparse import tokens as T

    out: list[str] = []
    for statement in sqlparse.parse(text):
        parts = list(statement.flatten())  # type: ignore[no-untyped-call]  # unannotated in sqlparse 0.6
        # sqlparse ends a statement with its ';' and the rest of that line (blanks, a comment).
        while parts and (parts[-1].is_whitespace or parts[-1].ttype in T.Comment):
            parts.pop()
        if parts and parts[-1].match(T.Punctuation, ";"):
            parts.pop()
        # A "--" comment goes, its line break stays.
        body = "".join(tok.value[len(tok.value.rstrip("\r\n")):]
                       if tok.ttype in T.Comment.Single and tok.value.startswith("--") else tok.value
                       for tok in parts).strip()
        if body:
            out.append(body)
    return out


def _json_value(value: Any) -> Any:
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray)):
        return value.hex()
    if isinstance(value, dict):
        return {str(k): _json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_value(v) for v in value]
    if hasattr(value, "asDict"):
        return _json_value(value.asDict(recursive=True))
    return value


def format_rows(columns: Sequence[str], rows: Sequence[Sequence[Any]], fmt: str) -> str:
    """Render a result: ``json`` is one object per line, ``csv`` has a header."""
    if fmt == "json":
        return "".join(json.dumps(dict(zip(columns, map(_json_value, r), strict=True)), ensure_ascii=False) + "\n" for r in rows)
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(columns)
        for r in rows:
            writer.writerow(["" if v is None else v for v in r])
        return buf.getvalue()
    if fmt != "table":
        raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    cells = [[("NULL" if v is None else str(v)) for v in r] for r in rows]
    widths = [len(c) for c in columns]
    for r in cells:
        widths = [max(w, len(v)) for w, v in zip(widths, r, strict=True)]
    sep = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
    lines = [sep, "| " + " | ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)) + " |", sep]
    lines += ["| " + " | ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) + " |" for r in cells]
    lines.append(sep)
    lines.append(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
    return "\n".join(lines) + "\n"


def _session(local: bool, one_shot_driver: bool) -> Any:
    """The stack's Spark Connect server (a session there costs ~a second), or with ``local`` a private driver
    in this process (a JVM start, ~15-20 s; works while the spark-connect service is down). A private driver for
    ``-e``/``-f`` statements runs them and exits (``one_shot_driver``: JIT for a short life); an interactive
    shell's may run heavy queries for an hour and keeps the JVM's defaults."""
    from spark_jobs.settings import load_settings

    settings = load_settings()
    if local:
        from spark_jobs.session import build_session

        spark = build_session(settings, "lake-sql", short_lived=one_shot_driver)
        spark.sparkContext.setLogLevel("ERROR")
        return spark
    import socket

    from spark_jobs.session import connect_session

    # pyspark's client retries a refused connection for minutes: check the port first and say what to do.
    try:
        socket.create_connection((settings.host, settings.spark_connect_port), timeout=5).close()
    except OSError as exc:
        raise SystemExit(f"lake sql: the stack's Spark Connect server ({settings.host}:{settings.spark_connect_port}, "
                         f"service spark-connect) does not answer: {exc}. Start it with `lake stack up` (see "
                         "`lake stack status`), or run `lake sql --local ...` for a private Spark driver.") from None
    import logging

    from pyspark.logger import PySparkLogger

    # The Connect client logs every failed statement as a JSON record with the server's stack trace; the
    # shell prints the error itself (below), once.
    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        PySparkLogger.getLogger(name).setLevel(logging.CRITICAL)
    return connect_session(settings)


def run(statements: str | None, fmt: str, local: bool = False) -> int:
    from pyspark.errors import PySparkException

    from spark_jobs.cli.sql_guard import stream_owned_write, used_database

    spark = _session(local, statements is not None)
    current_db = "default"

    def execute(text: str) -> bool:
        nonlocal current_db
        result = None
        for stmt in split_statements(text):
            refused = stream_owned_write(stmt, current_db)
            if refused:
                click.echo(f"lake sql: refusing {stmt[:200]!r}: {refused}. A second driver writing it races the "
                           "stream's commits and leaves silver unequal to its source (docs/operations.md, Second "
                           "writers; to undo a bad write, `lake restore-path`).", err=True)
                return False
            try:
                result = spark.sql(stmt)
                rows = result.collect()
            except PySparkException as exc:
                message = str(exc).split("\n\nJVM stacktrace:")[0]  # the server's Java frames help no user
                click.echo(f"error in statement: {stmt[:200]}\n{message}", err=True)
                return False
            current_db = used_database(stmt) or current_db
        if result is not None:
            sys.stdout.write(format_rows(result.columns, [tuple(r) for r in rows], fmt))
        return True

    if statements is not None:
        try:
            return 0 if execute(statements) else 1
        finally:
            spark.stop()
    click.echo("lake sql: statements end with ';'. Ctrl-D to quit.", err=True)
    pending = ""
    while True:
        try:
            line = input("lake> " if not pending else "  ... ")
        except EOFError:
            click.echo(err=True)
            return 0
        pending += line + "\n"
        if pending.rstrip().endswith(";"):
            execute(pending)
            pending = ""
