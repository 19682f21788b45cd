"""Live table vs its replayed shadow: row counts, keys only on one side, a sample of changed rows.

All in Spark. First one aggregate job over both sides, no join: each row's keys pick one of :data:`BUCKETS`
buckets, and per side and bucket the rows are counted and their 128-bit fingerprints (keys and compared columns)
XORed together, so at most ``2 x BUCKETS`` small rows reach the driver. A bucket equal on both sides holds the
same rows (keys are unique per side; the count catches rows that cancel out). Only the buckets that differ are
joined: a full outer join on the keys and a fingerprint of each row's compared columns (the shuffle carries keys
and two hashes, not whole rows) for the counts and, when they show a difference, a second join of the whole rows
for the samples; only the counts and at most ``sample`` rows per kind reach the driver.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import StructType


#: Buckets of the first pass (:func:`diff_frames`): a difference costs the join of 1/BUCKETS of the rows.
BUCKETS = 64


@dataclass(frozen=True)
class TableDiff:
    """What differs between ``live`` and ``shadow`` (compared on ``columns``, matched on ``keys``)."""

    live: str
    shadow: str
    keys: tuple[str, ...]
    columns: tuple[str, ...]
    live_rows: int
    shadow_rows: int
    only_live: int
    only_shadow: int
    changed: int
    only_live_keys: list[dict[str, Any]] = field(default_factory=list)
    only_shadow_keys: list[dict[str, Any]] = field(default_factory=list)
    changed_rows: list[dict[str, Any]] = field(default_factory=list)  # {"key":..., "live":..., "shadow":...}

    @property
    def same(self) -> bool:
        return not (self.only_live or self.only_shadow or self.changed)

    def lines(self) -> list[str]:
        """The diff for people: counts, then the samples (one line each)."""
        out = [f"{self.live} vs {self.shadow}: rows {self.live_rows} live, {self.shadow_rows} replayed; "
               f"{self.only_live} key(s) only live, {self.only_shadow} only replayed, {self.changed} changed"
               + (" (identical)" if self.same else "")]
        out += [f"  only live     {k}" for k in self.only_live_keys]
        out += [f"  only replayed {k}" for k in self.only_shadow_keys]
        for row in self.changed_rows:
            cols = ", ".join(f"{c}: {row['live'][c]!r} -> {row['shadow'][c]!r}" for c in row["columns"])
            out.append(f"  changed       {row['key']}: {cols}")
        return out

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("live", "shadow", "keys", "live_rows", "shadow_rows", "only_live",
                                              "only_shadow", "changed")}


def compared_columns(live: DataFrame, shadow: DataFrame, keys: Sequence[str], skip: Sequence[str]) -> list[str]:
    """Columns both frames have, minus the keys and the bookkeeping ``skip`` columns, in the live table's order."""
    theirs = set(shadow.columns)
    return [c for c in live.columns if c in theirs and c not in keys and c not in skip]


def fingerprint(columns: Sequence[str], types: StructType) -> list[Column]:
    """Two independent 64-bit hashes of ``columns`` (xxhash64 of the columns, and of a salt and the columns in
    reverse order), each column cast to its type in ``types`` (the live table's: a shadow's wider type hashes
    otherwise) and preceded by its NULL flag: Spark's hashes skip a NULL, so without the flag ``(NULL, 1)`` and
    ``(1, NULL)`` would hash alike. A map is hashed as its entries sorted (Spark does not hash maps)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import MapType

    def value(name: str) -> Column:
        kind = types[name].dataType
        col = F.col(f"`{name}`").cast(kind)
        return F.array_sort(F.map_entries(col)) if isinstance(kind, MapType) else col

    flagged = [x for c in columns for x in (F.col(f"`{c}`").isNull(), value(c))]
    if not flagged:
        return [F.lit(0).cast("bigint"), F.lit(0).cast("bigint")]
    return [F.xxhash64(*flagged), F.xxhash64(F.lit("lake-diff"), *reversed(flagged))]


def diff_frames(live: DataFrame, shadow: DataFrame, keys: Sequence[str], *, live_name: str, shadow_name: str,
                skip: Sequence[str] = (), sample: int = 5) -> TableDiff:
    """Compare ``live`` with ``shadow`` by ``keys`` (unique in both) on their common columns but ``skip``."""
    from pyspark.sql import functions as F

    missing = [k for k in keys if k not in live.columns or k not in shadow.columns]
    if missing:
        raise ValueError(f"diff {live_name} vs {shadow_name}: key column(s) {missing} missing from one side")
    columns = compared_columns(live, shadow, keys, skip)
    quoted = [f"`{c}`" for c in columns]
    key_cols = [F.col(f"`{k}`") for k in keys]
    prints = F.struct(*fingerprint(columns, live.schema))
    bucket = F.pmod(fingerprint(list(keys), live.schema)[0], F.lit(BUCKETS))
    totals, differing = _bucket_totals(live, shadow, bucket, fingerprint([*keys, *columns], live.schema))
    if not differing:  # one pass over both sides, no join: the same rows
        return TableDiff(live_name, shadow_name, tuple(keys), tuple(columns), totals[0], totals[1], 0, 0, 0)
    # Only the rows of the buckets that differ go through the joins.
    live, shadow = (frame.where(bucket.isin(*differing)) for frame in (live, shadow))

    def sides(whole: bool) -> DataFrame:
        """The full outer join of both sides' keys and fingerprints (and with ``whole``, their compared columns)
        with ``_kind``: only_live, only_shadow, changed (fingerprints differ) or NULL (the same row)."""
        def side(frame: DataFrame, tag: str) -> DataFrame:
            rows = [F.struct(*quoted).alias(f"_{tag}")] if whole else []
            return frame.select(*key_cols, prints.alias(f"_h{tag}"),
                                *rows, F.lit(True).alias(f"_in_{tag}"))

        return side(live, "l").join(side(shadow, "r"), on=list(keys), how="full_outer").withColumn(
            "_kind", F.when(F.col("_in_r").isNull(), F.lit("only_live"))
            .when(F.col("_in_l").isNull(), F.lit("only_shadow"))
            .when(F.col("_hl") != F.col("_hr"), F.lit("changed")))

    # The counts from keys and fingerprints only: the shuffle carries two hashes per row, not the row (measured:
    # docs/benchmarks.md, `lake bench replay`). Not persisted: a spilled MEMORY_AND_DISK block is loaded into the
    # heap whole (`lake bench replay` of 2M events died of OutOfMemoryError in a 2 GiB driver when the whole-row
    # join was persisted).
    # The row totals are the first pass's (these joins see only the buckets that differ).
    counts = sides(whole=False).agg(
        *[F.count(F.when(F.col("_kind") == k, 1)).alias(k) for k in ("only_live", "only_shadow", "changed")],
    ).first()
    assert counts is not None
    samples: dict[str, list[Any]] = {"only_live": [], "only_shadow": [], "changed": []}
    if counts["only_live"] or counts["only_shadow"] or counts["changed"]:
        # The samples from the whole rows: a second join, only when there is something to show.
        joined = sides(whole=True)
        ranked = joined.where(F.col("_kind").isNotNull()).withColumn(
            "_n", F.row_number().over(_sample_window(keys)))
        for row in ranked.where(F.col("_n") <= sample).collect():
            samples[row["_kind"]].append(row)

    def key_of(r: Any) -> dict[str, Any]:
        return {k: r[k] for k in keys}

    changed = []
    for r in samples["changed"]:
        lv, sv = r["_l"].asDict(), r["_r"].asDict()
        changed.append({"key": key_of(r), "columns": [c for c in columns if lv[c] != sv[c]], "live": lv,
                        "shadow": sv})
    return TableDiff(live_name, shadow_name, tuple(keys), tuple(columns), totals[0], totals[1],
                     int(counts["only_live"]), int(counts["only_shadow"]),
                     int(counts["changed"]), [key_of(r) for r in samples["only_live"]],
                     [key_of(r) for r in samples["only_shadow"]], changed)


def _bucket_totals(live: DataFrame, shadow: DataFrame, bucket: Column,
                   prints: list[Column]) -> tuple[tuple[int, int], list[int]]:
    """One aggregate job over both sides: their row counts, and the buckets whose count or XORed fingerprints
    differ between them."""
    from pyspark.sql import functions as F

    def side(frame: DataFrame, tag: int) -> DataFrame:
        return frame.select(F.lit(tag).alias("_side"), bucket.alias("_bucket"),
                            prints[0].alias("_h1"), prints[1].alias("_h2"))

    rows = side(live, 0).unionByName(side(shadow, 1)).groupBy("_side", "_bucket").agg(
        F.count(F.lit(1)).alias("n"), F.expr("bit_xor(_h1)").alias("x1"), F.expr("bit_xor(_h2)").alias("x2")).collect()
    per: list[dict[int, tuple[int, int, int]]] = [{}, {}]
    for r in rows:
        per[int(r["_side"])][int(r["_bucket"])] = (int(r["n"]), int(r["x1"]), int(r["x2"]))
    differing = sorted(b for b in set(per[0]) | set(per[1]) if per[0].get(b) != per[1].get(b))
    return (sum(v[0] for v in per[0].values()), sum(v[0] for v in per[1].values())), differing


def _sample_window(keys: Sequence[str]) -> Any:
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    return Window.partitionBy("_kind").orderBy(*[F.col(f"`{k}`") for k in keys])
