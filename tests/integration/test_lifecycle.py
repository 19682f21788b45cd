"""Runs last (marked ``runs_last``; the integration conftest orders it): down leaves nothing behind; up again
keeps the data.

Restarting from existing state is what an operator does every day; the lake's
tables must survive it and no process may linger after ``lake stack down``.
"""

from __future__ import annotations

import json

import psutil
import pytest

from spark_jobs.settings import Settings
from spark_jobs.stack.manager import _port_in_use
from spark_jobs.stack.services import services
from tests.integration.lakehelpers import lake_sql, run_lake


@pytest.mark.runs_last
def test_down_leaves_no_process_and_up_restores_the_lake(stack: Settings) -> None:
    before = lake_sql("SELECT count(*) AS c FROM ops.smoke")[0]
    assert before["c"] > 0

    run_lake("stack", "down", timeout=300)
    marker = str(stack.state_dir)
    lingering = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmd = " ".join(proc.info["cmdline"] or [])
        if marker in cmd and "pytest" not in cmd:
            lingering.append(f"{proc.info['pid']}: {cmd[:150]}")
    assert lingering == []
    busy = [f"{setting}={getattr(stack, setting)}" for service in services(stack) for setting in service.port_settings
            if _port_in_use(stack.host, getattr(stack, setting))]
    assert busy == []
    status = json.loads(run_lake("stack", "status", "--json", check=False).stdout)
    assert all(s["pid"] is None and s["healthy"] is False for s in status["services"].values())

    run_lake("stack", "up", timeout=900)
    after = lake_sql("SELECT count(*) AS c FROM ops.smoke")[0]
    assert after == before
