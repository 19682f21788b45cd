"""CPU seconds of a streaming app's processes and threads, split into driver and executor work (psutil).

The benches report the driver's share of the CPU during catch-up (goal <= 10%):
:func:`cpu_snapshot` before and after, :func:`cpu_split` of the two. In ``local[*]`` the driver JVM also
runs the tasks, so its threads are told apart by name; GC/JIT/VM threads serve both sides and are
reported apart (``jvm_shared``), as are threads that exited in between. On a standalone cluster the
executors' JVMs are separate processes, found by the driver URL in their command line.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil

if TYPE_CHECKING:
    from spark_jobs.settings import Settings

#: JVM thread names (``/proc/<pid>/task/<tid>/comm``, 15 characters) of work done for Spark tasks: task threads,
#: the Python runner's writer threads feeding the Python workers, RocksDB's and the state store's background
#: threads, shuffle and block transfer.
EXECUTOR_THREADS = ("Executor task", "stdout writer", "stdin writer", "writer for", "rocksdb", "state-store",
                    "shuffle-", "block-manager-s", "RemoteBlock")
#: JVM threads no side owns: garbage collection, JIT compilers, VM housekeeping.
SHARED_THREADS = ("GC Thread", "G1 ", "C1 Compiler", "C2 Compiler", "VM ", "Sweeper", "Service Thread",
                  "Monitor Deflati", "Common-Cleaner", "Finalizer", "Reference Handl", "Signal Dispatch")


_TICK = os.sysconf("SC_CLK_TCK")


def _ticks(*seconds: float) -> int:
    """psutil's CPU seconds (``/proc``'s clock ticks over ``SC_CLK_TCK``) back in ticks: snapshots stay whole
    numbers, exactly the kernel's counts."""
    return sum(round(s * _TICK) for s in seconds)


def _own(proc: psutil.Process) -> int | None:
    """Ticks of ``proc`` itself (user + system), None if it is gone."""
    try:
        t = proc.cpu_times()
    except psutil.Error:
        return None
    return _ticks(t.user, t.system)


def _with_reaped(proc: psutil.Process) -> int | None:
    """Ticks of ``proc`` and of its children it has waited for (``cutime``, ``cstime``), None if it is gone."""
    try:
        t = proc.cpu_times()
    except psutil.Error:
        return None
    return _ticks(t.user, t.system, t.children_user, t.children_system)


def _children(proc: psutil.Process, recursive: bool = False) -> list[psutil.Process]:
    try:
        return list(proc.children(recursive=recursive))
    except psutil.Error:
        return []


def _thread_name(pid: int, tid: int) -> str | None:
    # psutil's threads() has each thread's id and CPU times but not its name, which says whose work it does:
    # read from /proc (the kernel's comm, at most 15 characters). None: the thread has exited.
    try:
        return Path(f"/proc/{pid}/task/{tid}/comm").read_text().rstrip("\n")
    except OSError:
        return None


def cluster_executors(app: str) -> list[int]:
    """Pids of the executor JVMs a standalone cluster's workers run for one application: ``app`` is its
    application id or its driver's RPC URL (``spark://CoarseGrainedScheduler@host:port``), both in their argv."""
    pids = []
    for proc in psutil.process_iter(["cmdline"]):
        argv = proc.info["cmdline"] or []  # None: not ours to read
        if "org.apache.spark.executor.CoarseGrainedExecutorBackend" in argv and app in argv:
            pids.append(proc.pid)
    return pids


def stream_executors_of(settings: Settings) -> str | None:
    """The streaming driver's RPC URL when it runs on a standalone cluster (its executors are other processes),
    else None (``local[*]``: the tasks run in the driver's JVM)."""
    if not settings.spark_master.startswith("spark://"):
        return None
    return f"spark://CoarseGrainedScheduler@{settings.host}:{settings.stream_driver_port}"


def _tree(out: dict[str, tuple[str, int]], root: psutil.Process, bucket: str) -> None:
    """Every process under ``root`` (Python workers), with their reaped children, into ``bucket``."""
    for proc in _children(root, recursive=True):
        ticks = _with_reaped(proc)
        if ticks is not None:
            out[f"pid:{proc.pid}"] = (bucket, ticks)


def cpu_snapshot(driver_pid: int, executors_of: str | None = None) -> dict[str, tuple[str, int]]:
    """CPU ticks of the streaming app now: ``{entity: (bucket, ticks)}``.

    Entities: the driver Python process (bucket ``driver_python``); each thread
    of its JVM child (``executor`` for task work, see :data:`EXECUTOR_THREADS`;
    ``jvm_shared`` for GC/JIT/VM; ``driver_jvm`` for the rest: scheduler, RPC,
    the streaming query's thread, Delta's commit code); the JVM's own total
    (``jvm_total``, which keeps the CPU of threads that already exited); every
    process under the JVM (Spark's Python workers: ``executor``, with their
    reaped children). With ``executors_of`` (the driver's RPC URL, on a standalone cluster) also the executor
    JVMs the workers run for it, whole (``executor``: every thread of an executor JVM, GC included, works for
    tasks) with their Python workers.
    """
    out: dict[str, tuple[str, int]] = {}
    try:
        driver = psutil.Process(driver_pid)
    except psutil.Error:
        return out
    ticks = _own(driver)
    if ticks is None:
        return out
    out["driver"] = ("driver_python", ticks)
    for jvm in _children(driver):
        try:
            if jvm.name() != "java":
                continue
            threads = jvm.threads()
        except psutil.Error:
            continue
        ticks = _own(jvm)
        if ticks is None:
            continue
        out[f"jvm:{jvm.pid}"] = ("jvm_total", ticks)
        for thread in threads:
            name = _thread_name(jvm.pid, thread.id)
            if name is None:
                continue
            bucket = ("executor" if name.startswith(EXECUTOR_THREADS)
                      else "jvm_shared" if name.startswith(SHARED_THREADS) else "driver_jvm")
            out[f"tid:{thread.id}"] = (bucket, _ticks(thread.user_time, thread.system_time))
        _tree(out, jvm, "executor")
    for pid in cluster_executors(executors_of) if executors_of else []:
        try:
            executor = psutil.Process(pid)
        except psutil.Error:
            continue
        ticks = _own(executor)
        if ticks is not None:
            out[f"exec:{pid}"] = ("executor", ticks)
            _tree(out, executor, "executor")
    return out


def cpu_split(before: dict[str, tuple[str, int]], after: dict[str, tuple[str, int]]) -> dict[str, Any]:
    """CPU seconds per bucket between two :func:`cpu_snapshot`, and the driver's share of all of it.

    JVM threads that exited in between are not in ``after``: their CPU is the
    JVM total's delta minus its live threads' (``jvm_exited_threads``), owner
    unknown. ``driver_share`` counts the driver Python process and the JVM's
    driver-side threads over everything; ``driver_share_upper`` adds the shared
    GC/JIT and the exited threads to the driver's side (a bound, not an estimate).
    """
    tick = _TICK
    seconds: dict[str, float] = {"driver_python": 0.0, "driver_jvm": 0.0, "executor": 0.0, "jvm_shared": 0.0,
                                 "jvm_total": 0.0}
    for key, (bucket, ticks) in after.items():
        seconds[bucket] += (ticks - before.get(key, (bucket, 0))[1]) / tick
    threads = seconds["driver_jvm"] + seconds["jvm_shared"] + sum(
        (ticks - before.get(k, (b, 0))[1]) / tick for k, (b, ticks) in after.items()
        if b == "executor" and k.startswith("tid:"))
    seconds["jvm_exited_threads"] = max(0.0, seconds.pop("jvm_total") - threads)
    total = sum(seconds.values())
    driver = seconds["driver_python"] + seconds["driver_jvm"]
    upper = driver + seconds["jvm_shared"] + seconds["jvm_exited_threads"]
    return {"cpu_seconds": {k: round(v, 1) for k, v in seconds.items()}, "total_cpu_seconds": round(total, 1),
            "driver_share": round(driver / total, 3) if total else None,
            "driver_share_upper": round(upper / total, 3) if total else None}
