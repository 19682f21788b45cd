"""Integration tests talk to the real local stack; it is started if not up."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from spark_jobs.settings import REPO_ROOT, Settings

LAKE = str(Path(sys.executable).parent / "lake")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/integration" in str(item.fspath):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def stack() -> Iterator[Settings]:
    from spark_jobs.stack import manager

    yield manager.up()


def run_lake(*args: str, env: dict[str, str] | None = None, timeout: float = 600,
             check: bool = True) -> subprocess.CompletedProcess[str]:
    # A test that opened a Spark Connect session has SPARK_CONNECT_MODE_ENABLED in its environment (pyspark
    # sets it); a `lake` child that inherited it could not build its own classic session.
    base = {k: v for k, v in os.environ.items() if k not in ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE")}
    proc = subprocess.run([LAKE, *args], capture_output=True, text=True, timeout=timeout,
                          env={**base, **(env or {})}, cwd=REPO_ROOT, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"lake {' '.join(args)} exited {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


def kill_program(settings: Settings, program: str) -> int:
    """SIGKILL a supervised program's whole process group (for the streaming app: the Python driver and its
    Spark JVM, as when a machine dies); returns the pid killed."""
    import signal

    from spark_jobs.stack import supervisor

    info = supervisor.program_info(settings, program)
    assert info and info["statename"] == "RUNNING", f"{program} not running: {info}"
    pid = int(info["pid"])
    os.killpg(os.getpgid(pid), signal.SIGKILL)
    return pid


def wait_running(settings: Settings, program: str, old_pid: int, timeout: float = 120) -> None:
    """Wait until the supervisor runs ``program`` again under a new pid (starting it if it gave up)."""
    import time

    from spark_jobs.stack import supervisor

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = supervisor.program_info(settings, program) or {}
        if info.get("statename") == "RUNNING" and info.get("pid") != old_pid:
            return
        if info.get("statename") in {"EXITED", "FATAL", "BACKOFF", "STOPPED"}:
            supervisor.start_program(settings, program)
        time.sleep(1)
    raise AssertionError(f"{program} did not come back after SIGKILL")


def wait_and_verify_cdc(timeout: float = 900) -> None:
    """`lake stream wait` (every committed change applied), then `lake verify cdc`: silver equals PostgreSQL."""
    import json

    waited = run_lake("stream", "wait", "--timeout", str(timeout), check=False, timeout=timeout + 60)
    assert waited.returncode == 0, waited.stdout[-2000:] + waited.stderr[-2000:]
    proc = run_lake("verify", "cdc", "--json", check=False, timeout=600)
    diffs = json.loads(proc.stdout)
    assert set(diffs) == {"silver.customers", "silver.products", "silver.orders", "silver.order_items"}
    bad = {t: lines[:10] for t, lines in diffs.items() if lines}
    assert not bad, json.dumps(bad, indent=1, ensure_ascii=False)
