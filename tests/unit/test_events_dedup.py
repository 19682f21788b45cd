"""DedupIndex: duplicates within a batch and across batches, eviction by arrival time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from spark_jobs.streaming.events import DedupIndex

T0 = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


def test_first_offset_wins_within_a_batch() -> None:
    index = DedupIndex(timedelta(minutes=10))
    rows = [("b", 0, 5), ("a", 1, 3), ("a", 0, 7), ("b", 0, 2)]
    firsts, dups = index.split(rows)
    assert sorted(rows[i] for i in firsts) == [("a", 0, 7), ("b", 0, 2)]
    assert sorted(dups) == [(0, 5), (1, 3)]


def test_an_id_seen_in_an_earlier_batch_is_a_duplicate() -> None:
    index = DedupIndex(timedelta(minutes=10))
    index.add_batch(1, T0, ["a", "b"])
    firsts, dups = index.split([("a", 0, 10), ("c", 0, 11)])
    assert [i for i in firsts] == [1] and dups == [(0, 10)]


def test_ids_leave_the_index_after_the_horizon_of_arrival_time() -> None:
    index = DedupIndex(timedelta(minutes=10))
    index.add_batch(1, T0, ["a"])
    index.add_batch(2, T0 + timedelta(minutes=5), ["b"])
    assert len(index) == 2
    index.add_batch(3, T0 + timedelta(minutes=11), ["c"])
    assert len(index) == 2  # "a" arrived more than 10 minutes before the newest batch
    firsts, dups = index.split([("a", 0, 1), ("b", 0, 2)])
    assert len(firsts) == 1 and dups == [(0, 2)]


def test_re_adding_a_known_id_keeps_its_first_batch() -> None:
    index = DedupIndex(timedelta(minutes=10))
    index.add_batch(1, T0, ["a"])
    index.add_batch(2, T0 + timedelta(minutes=9), ["a"])
    index.add_batch(3, T0 + timedelta(minutes=10, seconds=1), [])
    assert len(index) == 0  # evicted with batch 1, where it first arrived
