"""Offsets missing from a bronze table: changes Kafka dropped (compaction, retention) before the stream archived them.

Bronze holds every record the stream read with its Kafka offset, so a hole in a partition's offsets is a record it
never saw. On a compacted CDC topic that happens when the stream was down longer than ``min.compaction.lag.ms``:
the cleaner removed superseded changes it had not read. Spark 4.1's Kafka source does not fail on such a hole while
the partition's log start is at or before it (since SPARK-25005 it treats an offset it cannot fetch inside the
available range as an invisible record and skips it, with or without ``failOnDataLoss``); it fails only when the log
start moved past its next offset (retention deleted the head). So the stream neither stops nor tells: this check
does, per hole, with the keys that may lack their intermediate versions. A compacted record is always superseded by
a later record of its key in the same partition, so every key that lost a version is among the keys recorded after
the hole (an over-approximation: the list is where to look, not a verdict). Silver stays right (the newest change
per key survives compaction); an SCD2 history in gold misses the versions in the hole.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


@dataclass(frozen=True)
class OffsetGap:
    """Offsets ``first``..``last`` of ``partition`` are not in bronze; ``keys`` (a sample) were recorded after them."""

    table: str
    partition: int
    first: int
    last: int
    key_count: int
    keys: list[str]

    def line(self) -> str:
        return (f"{self.table}: partition {self.partition} offsets {self.first}-{self.last} "
                f"({self.last - self.first + 1} record(s)) were never archived (compacted or deleted in Kafka before "
                f"the stream read them); {self.key_count} key(s) recorded after them may lack intermediate versions: "
                + ", ".join(self.keys) + (" ..." if self.key_count > len(self.keys) else ""))


def offset_gaps(bronze: DataFrame, table: str, sample: int = 10) -> list[OffsetGap]:
    """The holes in ``bronze``'s offsets per partition (a partition's first offset above 0 counts), each with the
    distinct record keys (as text) recorded after it in that partition. Two small Spark jobs."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    by_offset = Window.partitionBy("partition").orderBy("offset")
    holes = (bronze.select("partition", "offset", F.lag("offset").over(by_offset).alias("previous"))
             .where(F.coalesce(F.col("previous"), F.lit(-1)) + 1 < F.col("offset"))
             .select("partition", (F.coalesce(F.col("previous"), F.lit(-1)) + 1).alias("first"),
                     (F.col("offset") - 1).alias("last")))
    found = holes.orderBy("partition", "first").collect()
    if not found:
        return []
    h = holes.alias("h")
    after = (bronze.alias("b").join(F.broadcast(h), (F.col("b.partition") == F.col("h.partition"))
                                    & (F.col("b.offset") > F.col("h.last")))
             .select(F.col("h.partition").alias("partition"), F.col("h.first").alias("first"),
                     F.coalesce(F.col("b.key").cast("string"), F.lit("<no key>")).alias("k"))
             .groupBy("partition", "first")
             .agg(F.countDistinct("k").alias("n"), F.slice(F.array_sort(F.collect_set("k")), 1, sample).alias("keys")))
    keys = {(int(r["partition"]), int(r["first"])): (int(r["n"]), list(r["keys"])) for r in after.collect()}
    return [OffsetGap(table, int(r["partition"]), int(r["first"]), int(r["last"]),
                      *keys.get((int(r["partition"]), int(r["first"])), (0, []))) for r in found]
