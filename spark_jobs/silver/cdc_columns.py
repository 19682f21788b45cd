"""A silver CDC table's own columns (ops, positions, metadata), and which payload columns may widen it: only
those PostgreSQL's table has.

A Debezium record carries its row image as a JSON object; any key a writer of the topic puts there
shows up as a column silver lacks. The records carry no schema (``schemas.enable=false``), so
PostgreSQL's catalog (``information_schema.columns``) is the registry a new column is checked
against: a name it has is added to silver (typed from it); a name it lacks was forged (or dropped
since) and its records are quarantined (:func:`spark_jobs.silver.cdc_parse.parse_records`'
``refused``). Names the lake reserves or Delta refuses never get this far: the parse rejects them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from spark_jobs.contracts.shop import POSITION_FIELDS, SILVER_METADATA

__all__ = ["POSITION_COLUMNS", "ROW_OPS", "SILVER_METADATA_COLUMNS", "SNAPSHOT_RANK", "STREAM_RANK", "admit_columns",
           "new_columns"]

#: Ops that change one row: create, update, delete, snapshot read.
ROW_OPS = ("c", "u", "d", "r")

SNAPSHOT_RANK = 0
STREAM_RANK = 1

#: Scalar position columns, most significant first; silver stores them so MERGE can compare.
POSITION_COLUMNS = POSITION_FIELDS

#: Metadata columns a silver table stores next to the row image (typed in the contract: SILVER_METADATA).
SILVER_METADATA_COLUMNS = tuple(SILVER_METADATA.names)


def new_columns(current: Sequence[str], payload: Iterable[str]) -> list[str]:
    """Payload column names that ``current`` (silver's columns) lacks, compared case-insensitively as Spark
    resolves names, each exact name once, sorted. Every spelling is kept: ``Foo`` and ``foo`` are both checked
    against PostgreSQL, so a forged spelling cannot hide a real column or the other way round."""
    known = {n.lower() for n in current}
    return sorted({n for n in payload if n.lower() not in known})


def admit_columns(current: Sequence[str], candidates: Sequence[str], source_types: Mapping[str, str]
                  ) -> tuple[dict[str, str], list[str]]:
    """(columns to add to silver with their Spark SQL types, names refused) for ``candidates``
    (:func:`new_columns`), given ``source_types``: the silver type of each candidate PostgreSQL's table has.

    A candidate PostgreSQL lacks is refused. Of the ones it has, the first spelling of a name (case-insensitively)
    is added; a second spelling stays in ``_extra`` (Spark cannot hold both), as does a name silver already has in
    another case.
    """
    known = {n.lower() for n in current}
    accepted: dict[str, str] = {}
    refused: list[str] = []
    for name in candidates:
        if name not in source_types:
            refused.append(name)
        elif name.lower() not in known:
            known.add(name.lower())
            accepted[name] = source_types[name]
    return accepted, refused
