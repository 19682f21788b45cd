"""The replay's diff (replay/diff.py): counts from keys and row fingerprints, samples from the whole rows."""

from __future__ import annotations

from typing import Any

from spark_jobs.replay.diff import diff_frames

LIVE = "id int, a string, b bigint, tags array<string>, extra map<string,string>"


def _diff(spark: Any, live: list[tuple[Any, ...]], shadow: list[tuple[Any, ...]], shadow_ddl: str = LIVE) -> Any:
    return diff_frames(spark.createDataFrame(live, LIVE), spark.createDataFrame(shadow, shadow_ddl), ["id"],
                       live_name="silver.t", shadow_name="replay.silver__t", sample=5)


def test_identical_rows_are_the_same_whatever_the_map_order_and_a_wider_shadow_type(spark: Any) -> None:
    live = [(1, "x", 10, ["a"], {"k": "v", "j": "w"}), (2, None, None, None, None)]
    shadow = [(1, "x", 10, ["a"], {"j": "w", "k": "v"}), (2, None, None, None, None)]
    d = _diff(spark, live, shadow, "id bigint, a string, b long, tags array<string>, extra map<string,string>")
    assert d.same
    # b as an int in the shadow: hashed as the live table's bigint
    d = _diff(spark, live, shadow, "id int, a string, b int, tags array<string>, extra map<string,string>")
    assert (d.live_rows, d.shadow_rows, d.only_live, d.only_shadow, d.changed, d.same) == (2, 2, 0, 0, 0, True)
    assert d.changed_rows == [] and d.only_live_keys == []


def test_a_null_moved_to_another_column_is_a_change(spark: Any) -> None:
    """Spark's hashes skip NULLs: ("1", NULL) and (NULL, 1) must still differ."""
    d = _diff(spark, [(1, "1", None, None, None)], [(1, None, 1, None, None)])
    assert (d.changed, d.same) == (1, False)
    (row,) = d.changed_rows
    assert row["key"] == {"id": 1} and row["columns"] == ["a", "b"]


def test_counts_and_samples_of_each_kind(spark: Any) -> None:
    live = [(1, "x", 1, ["a"], None), (2, "y", 2, None, None), (3, "z", 3, None, {"k": "v"})]
    shadow = [(1, "x", 1, ["a", "b"], None), (3, "z", 3, None, {"k": "w"}), (4, "n", 4, None, None)]
    d = _diff(spark, live, shadow)
    assert (d.live_rows, d.shadow_rows, d.only_live, d.only_shadow, d.changed) == (3, 3, 1, 1, 2)
    assert d.only_live_keys == [{"id": 2}] and d.only_shadow_keys == [{"id": 4}]
    assert [(r["key"], r["columns"]) for r in d.changed_rows] == [({"id": 1}, ["tags"]), ({"id": 3}, ["extra"])]


def test_only_the_buckets_that_differ_are_joined_and_the_totals_are_whole(spark: Any) -> None:
    """500 rows over the 64 buckets of the first pass, three differences: the joins see only their buckets, yet the
    row totals are both sides' and each difference is found with its key."""
    from pyspark.sql import functions as F

    from spark_jobs.replay.diff import BUCKETS, fingerprint

    live = [(i, f"v{i}", i, None, None) for i in range(500)]
    shadow = [r for r in live if r[0] != 7]
    shadow = [(i, "changed", b, t, e) if i == 42 else (i, a, b, t, e) for i, a, b, t, e in shadow]
    shadow.append((900, "new", 900, None, None))
    d = _diff(spark, live, shadow)
    assert (d.live_rows, d.shadow_rows, d.only_live, d.only_shadow, d.changed) == (500, 500, 1, 1, 1)
    assert d.only_live_keys == [{"id": 7}] and d.only_shadow_keys == [{"id": 900}]
    assert [(r["key"], r["columns"]) for r in d.changed_rows] == [({"id": 42}, ["a"])]
    frame = spark.createDataFrame(live, LIVE)
    buckets = {r[0] for r in frame.select(F.pmod(fingerprint(["id"], frame.schema)[0], F.lit(BUCKETS))).collect()}
    assert len(buckets) > 32  # the rows are spread: three differences are a few buckets of many
    same = _diff(spark, live, live)
    assert same.same and same.live_rows == 500
