"""``ops.replays``: one row per switch and per rollback of a live table (the replay's control table, with history).

A switch row holds the live table's version before and after the switch (``RESTORE`` target of a rollback), the
offsets the switched table was rebuilt up to (where a rollback re-applies what the stream wrote after it) and
until when the rollback is offered (``LAKE_REPLAY_ROLLBACK_HOURS``). A rollback row points back at its switch.
Append-only, written by ``lake replay`` / the ``lake_replay`` DAG (one replay at a time, :mod:`.run`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from spark_jobs.contracts.tables import schema_of
from spark_jobs.replay.targets import REPLAYS

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

SWITCH, ROLLBACK = "switch", "rollback"


@dataclass(frozen=True)
class Entry:
    """One row of ``ops.replays``."""

    replay_id: str
    table_name: str
    action: str
    shadow: str | None
    version_before: int | None
    version_after: int | None
    offsets: str | None
    rows: int | None
    at: datetime
    rollback_until: datetime | None
    run: str | None
    note: str | None

    def as_row(self) -> tuple[object, ...]:
        return (self.replay_id, self.table_name, self.action, self.shadow, self.version_before, self.version_after,
                self.offsets, self.rows, self.at, self.rollback_until, self.run, self.note)


def last_switch(replays: DataFrame, table: str) -> Entry | None:
    """The newest switch of ``table`` that no rollback has undone yet (None: nothing to roll back)."""
    from pyspark.sql import functions as F

    rows = replays.where(F.col("table_name") == table).orderBy(F.col("at").desc()).collect()
    for r in rows:
        if r["action"] == ROLLBACK:
            return None  # the newest action undid the switch before it
        if r["action"] == SWITCH:
            return Entry(*[r[f] for f in schema_of(REPLAYS).names])
    return None
