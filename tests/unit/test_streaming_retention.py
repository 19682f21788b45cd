"""Unprocessed records against Kafka retention (spark_jobs.streaming.retention), from fed-in numbers."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_jobs.streaming.retention import PartitionRetention, assess, log_bytes, partition_retention

DAY_MS = 86_400_000
NOW_MS = 1_800_000_000_000
GIB = 2**30


def part(*, processed: int = 99, low: int = 0, high: int = 200, age_days: float | None = 1.0,
         retention_ms: int = 7 * DAY_MS, retention_bytes: int = GIB, log_size: int | None = GIB // 4) -> PartitionRetention:
    stamp = None if age_days is None else NOW_MS - int(age_days * DAY_MS)
    return partition_retention("events.clickstream", 0, processed=processed, low=low, high=high,
                               oldest_timestamp_ms=stamp, now_ms=NOW_MS, retention_ms=retention_ms,
                               retention_bytes=retention_bytes, log_bytes=log_size)


def test_age_of_oldest_unprocessed_record_against_retention_ms() -> None:
    p = part(age_days=3.5)
    assert p.behind == 100
    assert p.age_s == pytest.approx(3.5 * 86_400)
    assert p.time_fraction == pytest.approx(0.5)


def test_bytes_behind_is_the_unprocessed_share_of_the_partition_log() -> None:
    # 200 records held in 1 GiB, 150 not processed: ~0.75 GiB after the first unprocessed record
    p = part(processed=49, log_size=GIB, retention_bytes=GIB, age_days=0.0)
    assert p.bytes_behind == round(GIB * 0.75)
    assert p.bytes_fraction == pytest.approx(0.75)
    assert p.fraction == pytest.approx(0.75)


def test_the_larger_fraction_counts() -> None:
    p = part(processed=149, age_days=6.3, log_size=GIB // 10)  # 50 of 200 records behind, 6.3 of 7 days
    assert p.time_fraction == pytest.approx(0.9)
    assert p.bytes_fraction == pytest.approx(0.025)
    assert p.fraction == pytest.approx(0.9)


def test_caught_up_partition_has_nothing_at_risk() -> None:
    p = part(processed=199, age_days=None)
    assert (p.behind, p.lost, p.age_s, p.bytes_behind, p.fraction) == (0, 0, None, 0, 0.0)
    assert assess([p], 0.5, 0.8) == ([], [])


def test_never_processed_partition_counts_from_the_log_start() -> None:
    p = part(processed=-1, low=40, high=200)
    assert (p.behind, p.lost) == (160, 0)


def test_no_limit_means_no_fraction() -> None:
    p = part(retention_ms=-1, retention_bytes=-1, age_days=365)
    assert (p.time_fraction, p.bytes_fraction, p.fraction) == (None, None, 0.0)


def test_unknown_log_size_leaves_the_time_check() -> None:
    p = part(log_size=None, age_days=6.0)
    assert p.bytes_behind is None
    assert p.fraction == pytest.approx(6 / 7)


def test_records_kafka_already_deleted_are_a_failure() -> None:
    p = part(processed=9, low=30, high=200)  # offsets 10..29 gone before the app read them
    assert (p.lost, p.behind) == (20, 170)
    failures, warnings = assess([p], 0.5, 0.8)
    assert warnings == []
    assert failures == ["events.clickstream:0: Kafka already deleted 20 record(s) the streaming app never archived "
                        "(the app fails at start with failOnDataLoss; docs/operations.md, Retention, says how to recover)"]


@pytest.mark.parametrize(("age_days", "failed", "warned"), [(3.0, 0, 0), (3.5, 0, 1), (6.0, 1, 0), (8.0, 1, 0)])
def test_thresholds(age_days: float, failed: int, warned: int) -> None:
    failures, warnings = assess([part(age_days=age_days, log_size=1)], 0.5, 0.8)
    assert (len(failures), len(warnings)) == (failed, warned)


def test_warning_names_partition_age_bytes_and_setting() -> None:
    _, warnings = assess([part(age_days=3.5, log_size=GIB // 2)], 0.5, 0.8)
    assert warnings == ["events.clickstream:0: 100 record(s) not archived, oldest unprocessed record 84.0 h old of "
                        "retention.ms 168.0 h (50.0%), ~0.25 GiB behind of retention.bytes 1.00 GiB (25.0%); past "
                        "LAKE_RETENTION_WARN_FRACTION=0.5: let the stream catch up (`lake stream start`) or raise "
                        "LAKE_KAFKA_*_RETENTION_* (docs/operations.md, Retention)"]


def test_log_bytes_sums_segments(tmp_path: Path) -> None:
    d = tmp_path / "events.clickstream-2"
    d.mkdir()
    (d / "00000000000000000000.log").write_bytes(b"x" * 10)
    (d / "00000000000000000100.log").write_bytes(b"x" * 5)
    (d / "00000000000000000000.index").write_bytes(b"x" * 1000)
    assert log_bytes(tmp_path, "events.clickstream", 2) == 15
    assert log_bytes(tmp_path, "events.clickstream", 7) == 0  # glob of a missing dir: nothing


def test_a_compacted_cdc_topic_is_measured_against_its_compaction_lag() -> None:
    from spark_jobs.streaming.retention import limits

    compacted = {"cleanup.policy": "compact", "min.compaction.lag.ms": str(2 * DAY_MS), "retention.ms": str(7 * DAY_MS),
                 "retention.bytes": str(GIB)}
    assert limits(compacted) == ("min.compaction.lag.ms", 2 * DAY_MS, -1)  # compaction deletes nothing by size
    assert limits({"cleanup.policy": "delete", "retention.ms": "5", "retention.bytes": "7"}) == ("retention.ms", 5, 7)
    assert limits({**compacted, "cleanup.policy": "compact,delete", "retention.ms": str(DAY_MS)}) == (
        "retention.ms", DAY_MS, GIB)
    name, ms, size = limits(compacted)
    p = partition_retention("shop.public.orders", 1, processed=9, low=0, high=20,
                            oldest_timestamp_ms=NOW_MS - int(1.2 * DAY_MS), now_ms=NOW_MS, retention_ms=ms,
                            retention_bytes=size, log_bytes=GIB, limit=name)
    assert p.time_fraction == pytest.approx(0.6) and p.bytes_fraction is None
    failures, warnings = assess([p], warn_fraction=0.5, fail_fraction=0.8)
    assert failures == []
    assert warnings and warnings[0].startswith("shop.public.orders:1: 10 record(s) not archived, oldest unprocessed "
                                               "record 28.8 h old of min.compaction.lag.ms 48.0 h (60.0%)")
    assert warnings[0].endswith("raise LAKE_KAFKA_CDC_MIN_COMPACTION_LAG_MS (docs/operations.md, Replay (Kappa))")


def test_an_unarchived_range_the_cleaner_already_compacted_fails_naming_gaps(tmp_path: Path) -> None:
    from spark_jobs.streaming.retention import cleaned_offsets

    (tmp_path / "cleaner-offset-checkpoint").write_text("0\n2\nshop.public.orders 1 40\nshop.public.customers 0 7\n")
    cleaned = cleaned_offsets(tmp_path)
    assert cleaned == {("shop.public.orders", 1): 40, ("shop.public.customers", 0): 7}
    assert cleaned_offsets(tmp_path / "missing") == {}

    def cdc(processed: int, cleaned_to: int | None) -> PartitionRetention:
        return partition_retention("shop.public.orders", 1, processed=processed, low=0, high=60,
                                   oldest_timestamp_ms=NOW_MS - DAY_MS, now_ms=NOW_MS, retention_ms=7 * DAY_MS,
                                   retention_bytes=-1, log_bytes=None, limit="min.compaction.lag.ms",
                                   cleaned=cleaned_to)

    assert cdc(processed=9, cleaned_to=40).compacted_unread == 30
    failures, _warnings = assess([cdc(processed=9, cleaned_to=40)], warn_fraction=0.5, fail_fraction=0.8)
    assert failures and failures[0].startswith("shop.public.orders:1: Kafka's log cleaner already compacted offsets "
                                               "10-39, which the streaming app has not archived")
    assert "`lake replay gaps`" in failures[0]
    # Archived past what the cleaner reached, or nothing compacted yet: nothing to report.
    assert cdc(processed=45, cleaned_to=40).compacted_unread == 0
    assert cdc(processed=9, cleaned_to=None).compacted_unread == 0
    assert assess([cdc(processed=45, cleaned_to=40)], warn_fraction=0.5, fail_fraction=0.8)[0] == []
