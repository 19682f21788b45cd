"""lake bench soak's figures: first/last windows of a long run, and the heap floor (spark_jobs.bench.soak)."""

from __future__ import annotations

import os
import subprocess
import sys

from spark_jobs.bench.soak import _floor, jvm_of, old_gen_mb, window_figures


def test_window_figures_compare_the_first_and_last_windows_only() -> None:
    start, end = 1000.0, 1000.0 + 30 * 60
    samples = ([(start + i, 1.0) for i in range(100)]  # first 5 minutes: 1 s
               + [(start + 600 + i, 50.0) for i in range(100)]  # the middle: not in either window
               + [(end - 60 + i / 10, 3.0) for i in range(100)])  # last 5 minutes: 3 s
    out = window_figures(samples, start, end, 5)
    assert out["first"] == {"n": 100, "p50_s": 1.0, "p95_s": 1.0, "max_s": 1.0}
    assert out["last"] == {"n": 100, "p50_s": 3.0, "p95_s": 3.0, "max_s": 3.0}
    assert out["last_to_first_p95"] == 3.0


def test_window_figures_without_samples_in_a_window_give_no_ratio() -> None:
    out = window_figures([(10.0, 2.0)], 0.0, 3600.0, 5)
    assert out["last"]["n"] == 0 and out["last_to_first_p95"] is None


def test_the_heap_floor_is_the_smallest_sample_in_the_window() -> None:
    samples = [(0.0, 500.0), (60.0, 300.0), (120.0, None), (400.0, 100.0)]
    assert _floor(samples, 0, 300) == 300.0
    assert _floor(samples, 130, 200) is None


def test_old_gen_of_a_process_that_is_no_jvm_is_unknown() -> None:
    assert old_gen_mb(os.getpid()) is None  # jstat cannot attach to Python
    # A driver whose only child is Python (not this test process: a worker that ran a Spark test has a JVM child).
    driver = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; "
                               "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)']); "
                               "print('ready', flush=True); time.sleep(30)"], stdout=subprocess.PIPE, text=True)
    try:
        assert driver.stdout is not None and driver.stdout.readline().strip() == "ready"
        assert jvm_of(driver.pid) is None  # a Python child is not the app's JVM
    finally:
        import psutil

        for child in psutil.Process(driver.pid).children(recursive=True):
            child.kill()
        driver.kill()
        driver.wait()
