"""spark_jobs.proc_cpu: the CPU split of the streaming app's processes and threads (from /proc snapshots)."""

from __future__ import annotations

import os

from spark_jobs.proc_cpu import cpu_snapshot, cpu_split


def test_cpu_split_charges_buckets_and_keeps_the_cpu_of_exited_threads_apart() -> None:
    tick = os.sysconf("SC_CLK_TCK")
    before = {"driver": ("driver_python", 0), "jvm:9": ("jvm_total", 10 * tick),
              "tid:1": ("driver_jvm", 2 * tick), "tid:2": ("executor", 3 * tick), "tid:3": ("jvm_shared", 5 * tick),
              "pid:20": ("executor", 0)}
    after = {"driver": ("driver_python", 1 * tick), "jvm:9": ("jvm_total", 30 * tick),
             "tid:1": ("driver_jvm", 4 * tick), "tid:2": ("executor", 9 * tick), "tid:3": ("jvm_shared", 8 * tick),
             "tid:4": ("executor", 4 * tick),  # a thread started in the window: counted from zero
             "pid:20": ("executor", 6 * tick)}
    got = cpu_split(before, after)
    # JVM: +20 s in all; live threads +2 (driver) +6 +4 (executor) +3 (shared) = 15: 5 s of exited threads
    assert got["cpu_seconds"] == {"driver_python": 1.0, "driver_jvm": 2.0, "executor": 16.0, "jvm_shared": 3.0,
                                  "jvm_exited_threads": 5.0}
    assert got["total_cpu_seconds"] == 27.0
    assert got["driver_share"] == round(3 / 27, 3) and got["driver_share_upper"] == round(11 / 27, 3)


def test_snapshot_of_this_process_sees_it_as_the_driver() -> None:
    snap = cpu_snapshot(os.getpid())
    assert snap["driver"][0] == "driver_python" and snap["driver"][1] >= 0
    assert cpu_snapshot(2**22 + 12345) == {}  # no such process: nothing
