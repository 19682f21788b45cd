"""spark_jobs.proc_cpu: the driver/executor CPU split the benches report."""

from __future__ import annotations

import os
import subprocess
import sys

from spark_jobs.proc_cpu import CpuSample, sample, share


def test_share_of_the_difference_between_two_samples() -> None:
    got = share(CpuSample(10.0, 40.0), CpuSample(12.0, 58.0))
    assert got == {"driver_cpu_s": 2.0, "executor_cpu_s": 18.0, "driver_cpu_share": 0.1}
    assert share(CpuSample(1.0, 1.0), CpuSample(1.0, 1.0))["driver_cpu_share"] is None


def test_a_python_worker_child_counts_as_executor_work_and_the_driver_as_driver() -> None:
    # A child named like Spark's Python worker daemon burns CPU: it is executor work, the parent driver work.
    import time

    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.5: pass\ninput()"
    before = sample(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", burn, "pyspark.daemon"], stdin=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while sample(os.getpid()).executor_s - before.executor_s < 0.4 and time.monotonic() < deadline:
            time.sleep(0.1)
        after = sample(os.getpid())
        assert after.executor_s - before.executor_s >= 0.4
        assert after.driver_s >= before.driver_s > 0
    finally:
        child.communicate(b"\n", timeout=30)
