"""spark_jobs.bench.proc_cpu: the CPU split of the streaming app's processes and threads (psutil snapshots)."""

from __future__ import annotations

import os
import time

from spark_jobs.bench.proc_cpu import cpu_snapshot, cpu_split


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


def test_cluster_executors_of_the_driver_count_as_executor_work() -> None:
    """On a standalone cluster the executors are other processes: found by the driver URL in their argv."""
    import subprocess
    import sys

    import psutil

    from spark_jobs.bench.proc_cpu import cluster_executors

    url = "spark://CoarseGrainedScheduler@127.0.0.9:17030"
    spin = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\ntime.sleep(60)"
    ours = subprocess.Popen([sys.executable, "-c", spin, "org.apache.spark.executor.CoarseGrainedExecutorBackend",
                             "--driver-url", url])
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)",
                              "org.apache.spark.executor.CoarseGrainedExecutorBackend", "--driver-url", url + "1"])
    try:
        deadline = time.monotonic() + 30
        while sum(psutil.Process(ours.pid).cpu_times()[:2]) < 0.2:  # user + system
            assert time.monotonic() < deadline, "the stand-in executor never used CPU"
            time.sleep(0.05)
        assert cluster_executors(url) == [ours.pid]
        snap = cpu_snapshot(os.getpid(), url)
        assert snap[f"exec:{ours.pid}"][0] == "executor" and f"exec:{other.pid}" not in snap
        assert cpu_split({}, snap)["cpu_seconds"]["executor"] >= 0.2
    finally:
        for p in (ours, other):
            p.kill()
            p.wait()


JVM = """
import json, os, subprocess, sys, threading, time

def thread(name, seconds, ready):
    def run():
        with open(f"/proc/self/task/{threading.get_native_id()}/comm", "w") as comm:
            comm.write(name)
        tids[name] = threading.get_native_id()
        t = time.thread_time()
        while time.thread_time() - t < seconds:
            pass
        ready.set()
        time.sleep(60)
    return threading.Thread(target=run, daemon=True)

tids = {}
events = [threading.Event(), threading.Event()]
for (name, seconds), ready in zip((("Executor task 1", 0.3), ("GC Thread#0", 0.1)), events):
    thread(name, seconds, ready).start()
for ready in events:
    ready.wait()
worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
print(json.dumps({"tids": tids, "worker": worker.pid}), flush=True)
time.sleep(60)
"""


def test_snapshot_buckets_the_jvm_child_threads_by_name_and_its_workers_as_executor(tmp_path) -> None:
    """A stand-in JVM (a Python named ``java``): its threads go to buckets by name, its children to executor,
    a child that is not a JVM is not counted."""
    import json
    import signal
    import subprocess
    import sys

    java = tmp_path / "java"  # the process's name (comm) is the file name it was started from
    java.symlink_to(sys.executable)
    jvm = subprocess.Popen([str(java), "-c", JVM], stdout=subprocess.PIPE, text=True, start_new_session=True)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert jvm.stdout is not None
        started = json.loads(jvm.stdout.readline())
        snap = cpu_snapshot(os.getpid())
        tick = os.sysconf("SC_CLK_TCK")
        assert snap[f"jvm:{jvm.pid}"][0] == "jvm_total" and snap[f"jvm:{jvm.pid}"][1] >= 0.3 * tick
        assert snap[f"tid:{started['tids']['Executor task 1']}"][0] == "executor"
        assert snap[f"tid:{started['tids']['Executor task 1']}"][1] >= 0.2 * tick  # spun 0.3 s; ticks are coarser
        assert snap[f"tid:{started['tids']['GC Thread#0']}"][0] == "jvm_shared"
        assert snap[f"tid:{jvm.pid}"][0] == "driver_jvm"  # the main thread, named "java"
        assert snap[f"pid:{started['worker']}"][0] == "executor"
        # Whole ids: a substring test failed when the child's pid was part of one of the JVM's thread ids.
        assert not any(key.split(":")[-1] == str(other.pid) for key in snap), snap
        split = cpu_split({}, snap)["cpu_seconds"]
        assert split["executor"] >= 0.2 and split["jvm_shared"] >= 0.05
    finally:
        os.killpg(jvm.pid, signal.SIGKILL)
        other.kill()
        for p in (jvm, other):
            p.wait()
