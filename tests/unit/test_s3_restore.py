"""Version selection of `lake restore-path` (spark_jobs.stack.s3_restore.plan) and its arguments."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import click
import pytest

from spark_jobs.cli.restore import parse_time
from spark_jobs.stack.bootstrap import bucket_policy
from spark_jobs.stack.s3_restore import ObjectVersion, RestoreAction, plan, split_s3_uri

T0 = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
AT = T0 + timedelta(minutes=10)


def v(key: str, vid: str, minutes: float, *, marker: bool = False, latest: bool = False,
      etag: str = "") -> ObjectVersion:
    return ObjectVersion(key, vid, T0 + timedelta(minutes=minutes), marker, latest, etag or vid)


def test_deleted_key_gets_its_version_before_the_delete_back() -> None:
    versions = [v("t/part-0", "d1", 20, marker=True, latest=True), v("t/part-0", "v1", 5)]
    assert plan(versions, AT) == [RestoreAction("t/part-0", "copy", "v1", T0 + timedelta(minutes=5))]


def test_overwritten_key_gets_the_newest_version_at_the_time() -> None:
    versions = [v("t/x", "v3", 30, latest=True), v("t/x", "v2", 9), v("t/x", "v1", 1)]
    assert plan(versions, AT) == [RestoreAction("t/x", "copy", "v2", T0 + timedelta(minutes=9))]


def test_key_created_after_the_time_is_deleted() -> None:
    assert plan([v("t/_delta_log/00002.json", "v1", 15, latest=True)], AT) == [
        RestoreAction("t/_delta_log/00002.json", "delete")]


def test_key_created_and_deleted_after_the_time_is_left_alone() -> None:
    assert plan([v("t/k", "d", 16, marker=True, latest=True), v("t/k", "v", 15)], AT) == []


def test_key_deleted_before_the_time_stays_deleted() -> None:
    assert plan([v("t/k", "d", 8, marker=True, latest=True), v("t/k", "v", 2)], AT) == []


def test_key_deleted_before_and_recreated_after_is_deleted() -> None:
    versions = [v("t/k", "v2", 20, latest=True), v("t/k", "d", 8, marker=True), v("t/k", "v1", 2)]
    assert plan(versions, AT) == [RestoreAction("t/k", "delete")]


def test_current_version_at_the_time_needs_nothing() -> None:
    assert plan([v("t/k", "v1", 3, latest=True)], AT) == []


def test_version_written_exactly_at_the_time_counts() -> None:
    versions = [v("t/k", "d", 11, marker=True, latest=True), v("t/k", "v1", 10)]
    assert plan(versions, AT) == [RestoreAction("t/k", "copy", "v1", AT)]


def test_second_restore_to_the_same_time_changes_nothing() -> None:
    # the first restore's copy is a new current version with the old one's bytes (same ETag)
    versions = [v("t/k", "copy", 30, latest=True, etag="e1"), v("t/k", "d", 20, marker=True),
                v("t/k", "v1", 5, etag="e1")]
    assert plan(versions, AT) == []


def test_keys_are_planned_independently_and_sorted() -> None:
    versions = [v("t/b", "b1", 12, latest=True), v("t/a", "a2", 20, marker=True, latest=True), v("t/a", "a1", 1)]
    assert [(a.key, a.kind) for a in plan(versions, AT)] == [("t/a", "copy"), ("t/b", "delete")]


def test_naive_time_is_refused() -> None:
    with pytest.raises(ValueError, match="no time zone"):
        plan([], datetime(2026, 11, 26, 12, 0))


@pytest.mark.parametrize(("uri", "expect"), [("s3a://lake/warehouse/ops/x", ("lake", "warehouse/ops/x/")),
                                              ("s3://lake/warehouse/ops/x/", ("lake", "warehouse/ops/x/"))])
def test_split_s3_uri(uri: str, expect: tuple[str, str]) -> None:
    assert split_s3_uri(uri) == expect


@pytest.mark.parametrize("uri", ["s3a://lake", "s3a://lake/", "/tmp/x", "file:///tmp/x", "s3a:///x"])
def test_split_s3_uri_refuses_bucket_and_other_schemes(uri: str) -> None:
    with pytest.raises(ValueError):
        split_s3_uri(uri)


def test_parse_time() -> None:
    assert parse_time("2026-11-26T12:10:00Z") == AT
    assert parse_time("2026-11-26T13:10:00+01:00") == AT
    for bad in ("2026-11-26T12:10:00", "yesterday"):
        with pytest.raises(click.BadParameter):
            parse_time(bad)


def test_lake_keys_read_versions_but_cannot_delete_them() -> None:
    statements = bucket_policy("lake")["Statement"]
    assert isinstance(statements, list)
    allowed = {a for s in statements if s["Effect"] == "Allow" for a in s["Action"]}
    denied = {a for s in statements if s["Effect"] == "Deny" for a in s["Action"]}
    assert {"s3:ListBucketVersions", "s3:GetObjectVersion"} <= allowed
    assert denied == {"s3:DeleteObjectVersion"}
    assert not {a for a in allowed if "Lifecycle" in a or "Versioning" in a}
