"""Runs last (marked ``runs_last``; the integration conftest orders it): down stops exactly its own state dir's
processes and leaves nothing behind; up again keeps the data.

Restarting from existing state is what an operator does every day; the lake's
tables must survive it and no process may linger after ``lake stack down``.

Another state dir's stack (``make test-cluster`` runs one in ``.lake-cluster`` beside ``.lake``) is modelled by
dummy processes rather than a second stack (too heavy on 2 cores): run as the service user ``lake stack down``
runs as, one with the supervisor's owner marker of ``<state dir>-cluster`` and its path in argv (a program of a
current stack), one with the path in argv only (a process whose environment cannot be read). ``<state dir>``
is a string prefix of both, which is what the old substring match killed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from spark_jobs.settings import Settings
from spark_jobs.stack.manager import _port_in_use, owned_by
from spark_jobs.stack.services import services
from spark_jobs.stack.supervisor import OWNER_ENV
from tests.integration.lakehelpers import lake_sql, run_lake


def _dummy(state_dir: Path, *, marker: bool, uid: int | None) -> subprocess.Popen[bytes]:
    """A process of ``state_dir``'s stack, as ``uid``, in a session of its own (outside any supervised process
    group)."""
    env = {k: v for k, v in os.environ.items() if k != OWNER_ENV}
    if marker:
        env[OWNER_ENV] = str(state_dir)
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)", f"{state_dir}/conf/kafka.properties"],
                            env=env, start_new_session=True, user=uid, cwd="/")


@pytest.mark.runs_last
def test_down_stops_exactly_its_own_processes_and_up_restores_the_lake(stack: Settings) -> None:
    before = lake_sql("SELECT count(*) AS c FROM ops.smoke")[0]
    assert before["c"] > 0
    # As the user that owns the state dir, whom `lake stack down` runs as when started by root: it could kill them.
    uid = os.stat(stack.state_dir).st_uid if os.geteuid() == 0 else None
    other = Path(f"{stack.state_dir}-cluster")
    others = [_dummy(other, marker=True, uid=uid), _dummy(other, marker=False, uid=uid)]
    # One of ours that escaped supervisord's process groups: down must still find and kill it.
    escaped = _dummy(stack.state_dir, marker=True, uid=uid)
    try:
        run_lake("stack", "down", timeout=300)
        assert [p.pid for p in others if p.poll() is not None] == [], "down killed another state dir's process"
        assert escaped.wait(timeout=10) is not None
    finally:
        for proc in [*others, escaped]:
            proc.kill()
            proc.wait()

    lingering = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmd = proc.info["cmdline"] or []
        try:
            environ: dict[str, str] | None = proc.environ()
        except psutil.Error:
            environ = None
        if owned_by(stack.state_dir, cmd, environ) and proc.info["pid"] != os.getpid():
            lingering.append(f"{proc.info['pid']}: {' '.join(cmd)[:150]}")
    assert lingering == []
    busy = [f"{setting}={getattr(stack, setting)}" for service in services(stack) for setting in service.port_settings
            if _port_in_use(stack.host, getattr(stack, setting))]
    assert busy == []
    status = json.loads(run_lake("stack", "status", "--json", check=False).stdout)
    assert all(s["pid"] is None and s["healthy"] is False for s in status["services"].values())

    run_lake("stack", "up", timeout=900)
    after = lake_sql("SELECT count(*) AS c FROM ops.smoke")[0]
    assert after == before
