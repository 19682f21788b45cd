"""lake bench soak's figures: first/last windows of a long run, and the heap floor (spark_jobs.bench.soak)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from spark_jobs.bench.soak import _floor, jvm_of, live_heap_mb, old_gen_mb, window_figures


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


def test_the_live_heap_is_what_a_full_gc_leaves_in_a_real_jvm(tmp_path: Path) -> None:
    """A JVM that keeps 40 MB and has thrown away 200 MB in its old generation: after live_heap_mb's full GC the old
    generation holds about the 40 MB (not the garbage), and jstat counts the full collection."""
    source = tmp_path / "Keep.java"
    source.write_text(
        "public class Keep {\n"
        "  static byte[][] kept = new byte[40][];\n"
        "  public static void main(String[] a) throws Exception {\n"
        "    java.util.List<byte[]> junk = new java.util.ArrayList<>();\n"
        "    for (int i = 0; i < 200; i++) junk.add(new byte[1 << 20]);\n"
        "    for (int i = 0; i < 40; i++) kept[i] = new byte[1 << 20];\n"
        "    junk = null;\n"
        "    System.out.println(\"ready\"); System.out.flush();\n"
        "    Thread.sleep(60_000);\n"
        "  }\n"
        "}\n")
    jvm = subprocess.Popen(["java", "-XX:+UseG1GC", "-Xms512m", "-Xmx512m", str(source)], stdout=subprocess.PIPE,
                           text=True)
    try:
        assert jvm.stdout is not None and jvm.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 30
        while old_gen_mb(jvm.pid) is None and time.monotonic() < deadline:  # jstat attaches once the JVM is up
            time.sleep(0.2)
        live = live_heap_mb(jvm.pid)
        assert live is not None and 38 <= live < 120, live
        gc = subprocess.run(["jstat", "-gc", str(jvm.pid)], capture_output=True, text=True, check=True).stdout
        header, values = (line.split() for line in gc.strip().splitlines()[:2])
        assert int(values[header.index("FGC")]) >= 1
    finally:
        jvm.kill()
        jvm.wait()
    assert live_heap_mb(os.getpid()) is None  # not a JVM: refused before jcmd (whose attach sends a SIGQUIT)
