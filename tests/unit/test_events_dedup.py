"""DedupIndex: duplicates within a batch and across batches, eviction by arrival time."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa

from spark_jobs.driver_delta import DriverTable
from spark_jobs.streaming.events import SILVER, DedupIndex, EventsApp, partition_spans

T0 = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


def split(index: DedupIndex, rows: list[tuple[str, int, int]]) -> tuple[list[int], list[tuple[int, int]]]:
    """``rows`` = (event_id, partition, offset) -> (indexes of first occurrences, sorted (partition, offset) of
    duplicates), by ``DedupIndex.duplicates``."""
    dup, _new = index.duplicates(pa.array([r[0] for r in rows], pa.string()), np.array([r[1] for r in rows]),
                                 np.array([r[2] for r in rows]))
    return [i for i in range(len(rows)) if not dup[i]], sorted((r[1], r[2]) for i, r in enumerate(rows) if dup[i])


def test_first_offset_wins_within_a_batch() -> None:
    index = DedupIndex(timedelta(minutes=10))
    rows = [("b", 0, 5), ("a", 1, 3), ("a", 0, 7), ("b", 0, 2)]
    firsts, dups = split(index, rows)
    assert sorted(rows[i] for i in firsts) == [("a", 0, 7), ("b", 0, 2)]
    assert sorted(dups) == [(0, 5), (1, 3)]


def test_an_id_seen_in_an_earlier_batch_is_a_duplicate() -> None:
    index = DedupIndex(timedelta(minutes=10))
    index.add_batch(1, T0, ["a", "b"])
    firsts, dups = split(index, [("a", 0, 10), ("c", 0, 11)])
    assert [i for i in firsts] == [1] and dups == [(0, 10)]


def test_ids_leave_the_index_after_the_horizon_of_arrival_time() -> None:
    index = DedupIndex(timedelta(minutes=10))
    index.add_batch(1, T0, ["a"])
    index.add_batch(2, T0 + timedelta(minutes=5), ["b"])
    assert len(index) == 2
    index.add_batch(3, T0 + timedelta(minutes=11), ["c"])
    assert len(index) == 2  # "a" arrived more than 10 minutes before the newest batch
    firsts, dups = split(index, [("a", 0, 1), ("b", 0, 2)])
    assert len(firsts) == 1 and dups == [(0, 2)]


def test_re_adding_a_known_id_keeps_its_first_batch() -> None:
    index = DedupIndex(timedelta(minutes=10))
    index.add_batch(1, T0, ["a"])
    index.add_batch(2, T0 + timedelta(minutes=9), ["a"])
    index.add_batch(3, T0 + timedelta(minutes=10, seconds=1), [])
    assert len(index) == 0  # evicted with batch 1, where it first arrived


def _reference(index_ids: set[str], rows: list[tuple[str, int, int]]) -> set[tuple[int, int]]:
    """Duplicates by the rule, one row at a time: the lowest (partition, offset) of an id wins."""
    seen = set(index_ids)
    dups = set()
    for event_id, p, o in sorted(rows, key=lambda r: (r[1], r[2])):
        if event_id in seen:
            dups.add((p, o))
        seen.add(event_id)
    return dups


def test_vectorised_duplicates_equal_the_row_by_row_rule() -> None:
    rng = random.Random(7)
    for _ in range(50):
        index = DedupIndex(timedelta(minutes=10))
        known = {f"id{rng.randrange(60)}" for _ in range(rng.randrange(0, 15))}
        index.add_batch(1, T0, sorted(known))
        offsets = {0: 0, 1: 0, 2: 0}
        rows = []
        for _ in range(rng.randrange(1, 80)):
            p = rng.randrange(3)
            offsets[p] += rng.randrange(1, 4)
            rows.append((f"id{rng.randrange(60)}", p, offsets[p]))
        rng.shuffle(rows)  # a batch's rows need not be in Kafka order
        dup, new_ids = index.duplicates(pa.array([r[0] for r in rows]), np.array([r[1] for r in rows]),
                                        np.array([r[2] for r in rows]))
        want = _reference(known, rows)
        assert {(rows[i][1], rows[i][2]) for i in range(len(rows)) if dup[i]} == want
        firsts = sorted((r for r in rows if (r[1], r[2]) not in want), key=lambda r: (r[1], r[2]))
        assert new_ids == [r[0] for r in firsts]  # each new id once, in Kafka order


def test_partition_spans_are_first_and_last_offset_per_partition() -> None:
    parts = np.array([2, 0, 2, 0, 2], dtype=np.int64)
    offs = np.array([17, 5, 9, 3, 11], dtype=np.int64)
    assert partition_spans(parts, offs) == {"0": [3, 5], "2": [9, 17]}
    assert partition_spans(np.array([], dtype=np.int64), np.array([], dtype=np.int64)) == {}


def test_restart_loads_the_ids_that_arrived_within_the_horizon_from_silver(tmp_path: Path) -> None:
    """``EventsApp._load_recent_ids`` on a real (local) Delta table: batches at or after ``since``, grouped."""
    from deltalake import write_deltalake

    micros = pa.timestamp("us", tz="UTC")
    rows = [("a", 1, T0), ("b", 1, T0 + timedelta(seconds=1)), ("c", 2, T0 + timedelta(minutes=3)),
            ("d", 3, T0 + timedelta(minutes=6)), ("e", 3, T0 + timedelta(minutes=6)), ("z", 0, T0 - timedelta(hours=1))]
    write_deltalake(str(tmp_path), pa.table({"event_id": [r[0] for r in rows], "_batch_id": [r[1] for r in rows],
                                             "_ingest_time": pa.array([r[2] for r in rows], micros)}))
    app = EventsApp.__new__(EventsApp)  # only the index and the silver table are needed
    app.index = DedupIndex(timedelta(minutes=10))
    app.driver_tables = {SILVER: DriverTable(None, SILVER, str(tmp_path))}
    app._load_recent_ids(T0)
    assert app.index._first == {"a": 1, "b": 1, "c": 2, "d": 3, "e": 3}  # not "z": it arrived before T0
    assert [(b, t) for b, t, _ in app.index._batches] == [
        (1, T0 + timedelta(seconds=1)), (2, T0 + timedelta(minutes=3)), (3, T0 + timedelta(minutes=6))]
