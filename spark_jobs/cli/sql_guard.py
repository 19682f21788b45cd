"""Which statements of ``lake sql`` would write a table the streaming app owns (docs/operations.md, Second writers).

A client-side check, not a security boundary: it reads the statement's target with regular expressions (no SQL
parser is a dependency) after blanking string literals and comments, so it catches what a person types by
mistake (``DELETE FROM silver.orders``, ``INSERT INTO bronze...``, ``DROP DATABASE hot CASCADE``, a
``delta.`s3a://.../warehouse/silver/orders``` path) and nothing that goes around ``lake sql`` (Thrift,
Spark Connect from another client, a job). Tables not in the registry, or owned by other writers, pass.
"""

from __future__ import annotations

import re

from spark_jobs.contracts.tables import CDC_QUERY, EVENTS_DRIVER, EVENTS_QUERY, HOT_DRIVER, TABLES

#: The streaming app's writers in the table registry.
STREAM_WRITERS = frozenset({CDC_QUERY, EVENTS_QUERY, EVENTS_DRIVER, HOT_DRIVER})

STREAM_TABLES = {name: t.writer for name, t in TABLES.items() if t.writer in STREAM_WRITERS}
STREAM_DATABASES = frozenset(name.split(".")[0] for name in STREAM_TABLES)

_PART = r"(?:`[^`]*`|[A-Za-z_][\w$]*)"
_IDENT = rf"{_PART}(?:\s*\.\s*{_PART})*"
_WRITE = re.compile(
    r"\b(?:INSERT\s+(?:INTO|OVERWRITE)(?:\s+TABLE)?|UPDATE|DELETE\s+FROM|MERGE\s+INTO|TRUNCATE\s+TABLE"
    r"|DROP\s+TABLE(?:\s+IF\s+EXISTS)?|ALTER\s+TABLE|(?:CREATE\s+OR\s+)?REPLACE\s+TABLE"
    r"|CREATE\s+(?:EXTERNAL\s+)?TABLE(?:\s+IF\s+NOT\s+EXISTS)?|OPTIMIZE|VACUUM|RESTORE\s+TABLE|REORG\s+TABLE"
    r"|(?:MSCK\s+)?REPAIR\s+TABLE|CONVERT\s+TO\s+DELTA|COPY\s+INTO)"
    rf"\s+(?P<target>{_IDENT})", re.IGNORECASE)
_DROP_DB = re.compile(rf"\bDROP\s+(?:DATABASE|SCHEMA|NAMESPACE)(?:\s+IF\s+EXISTS)?\s+(?P<target>{_IDENT})",
                      re.IGNORECASE)
_USE = re.compile(rf"^\s*USE\s+(?:DATABASE\s+|SCHEMA\s+|NAMESPACE\s+)?(?P<target>{_IDENT})\s*$", re.IGNORECASE)
_BLANK = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|--[^\n]*|/\*.*?\*/", re.DOTALL)
_PATH = re.compile(r"/warehouse/(?P<db>[a-z_][a-z0-9_]*)/(?P<table>[a-z_][a-z0-9_]*)/?$")


def _parts(ident: str) -> list[str]:
    return [p.strip().strip("`") for p in re.findall(_PART, ident)]


def _table(ident: str, current_db: str) -> str | None:
    """``db.table`` named by ``ident`` (a name, ``catalog.db.table``, or a Delta path), lower case."""
    parts = _parts(ident)
    path = next((p for p in parts if "://" in p), None)
    if path is not None:
        m = _PATH.search(path.rstrip("/").lower() + "/")
        return f"{m['db']}.{m['table']}" if m else None
    parts = [p.lower() for p in parts]
    if len(parts) == 1:
        return f"{current_db.lower()}.{parts[0]}"
    return ".".join(parts[-2:])


def used_database(statement: str) -> str | None:
    """The database a ``USE`` statement switches to (None for any other statement)."""
    m = _USE.match(_BLANK.sub("''", statement))
    return _parts(m["target"])[-1].lower() if m else None


def stream_owned_write(statement: str, current_db: str = "default") -> str | None:
    """Why ``statement`` must not run from this driver (the table and its writer), or None when it may."""
    text = _BLANK.sub("''", statement)
    for m in _DROP_DB.finditer(text):
        db = _parts(m["target"])[-1].lower()
        if db in STREAM_DATABASES:
            owned = sorted(t for t in STREAM_TABLES if t.startswith(db + "."))
            return f"database {db} holds tables the streaming app writes ({', '.join(owned)})"
    for m in _WRITE.finditer(text):
        table = _table(m["target"], current_db)
        if table in STREAM_TABLES:
            return f"{table} is written by the {STREAM_TABLES[table]} alone"
    return None
