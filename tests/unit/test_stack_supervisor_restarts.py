"""Crash loops and kills under a real supervisord, with the program sections ``lake stack up`` writes.

Throwaway Python programs stand in for the stack's JVMs: one that always dies within its ``start_secs``
(a misconfigured service) must end FATAL after its retries; one that ran past its ``start_secs`` and is
SIGKILLed (the crash tests' kill of the stream or Connect) must be restarted every time, more often than
``start_retries``. ``lake stack status`` must then show the restarts, the last exit and fail on FATAL.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spark_jobs import cli
from spark_jobs.settings import Settings, load_settings
from spark_jobs.stack import health, manager, supervisor
from spark_jobs.stack.services import Program, Service

CRASH_CODE = "import sys, time; time.sleep(0.3); sys.exit(3)"
STEADY_CODE = "import time; time.sleep(3600)"


def _service(name: str, code: str, start_secs: int, start_retries: int) -> Service:
    prog = Program(name=name, command=[sys.executable, "-c", code], start_secs=start_secs,
                   start_retries=start_retries, stop_wait=5)
    return Service(name=name, programs=(prog,), ports=(), endpoint=f"{name}://",
                   probe=lambda s: (True, "probe ok"), start_timeout=10, hint="")


SERVICES = [_service("crashy", CRASH_CODE, start_secs=2, start_retries=2),
            _service("steady", STEADY_CODE, start_secs=1, start_retries=1)]


@pytest.fixture
def sv(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[Settings]:
    state = tmp_path_factory.mktemp("sv")  # short: the supervisor socket path must fit a unix socket
    monkeypatch.setenv("LAKE_STATE_DIR", str(state))
    settings = load_settings({"LAKE_STATE_DIR": str(state)})
    monkeypatch.setattr(manager, "services", lambda s: SERVICES)
    supervisor.start_daemon(settings, SERVICES)
    try:
        yield settings
    finally:
        supervisor.shutdown(settings, timeout=30)


def _wait_for(settings: Settings, name: str, done: Any, timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    info: dict[str, Any] = {}
    while time.monotonic() < deadline:
        info = supervisor.program_info(settings, name) or {}
        if done(info):
            return info
        time.sleep(0.2)
    raise AssertionError(f"{name} never reached the expected state; last {info}")


def test_a_program_that_keeps_dying_quickly_ends_fatal(sv: Settings) -> None:
    supervisor.start_program(sv, "crashy")
    _wait_for(sv, "crashy", lambda i: i.get("statename") == "FATAL")
    history = supervisor.program_history(sv)["crashy"]
    # The first spawn and start_retries=2 retries after a backoff each, then supervisord gave up.
    assert (history.restarts, history.last_exit, history.gave_up) == (2, "exit status 3; not expected", True)


def test_a_killed_program_that_had_started_is_restarted_every_time(sv: Settings) -> None:
    supervisor.start_program(sv, "steady")
    pid = _wait_for(sv, "steady", lambda i: i.get("statename") == "RUNNING")["pid"]
    for _ in range(3):  # more kills than start_retries=1: a kill after RUNNING does not use up the retries
        os.kill(pid, signal.SIGKILL)
        old = pid
        pid = _wait_for(sv, "steady", lambda i, old=old: i.get("statename") == "RUNNING" and i["pid"] != old)["pid"]
    history = supervisor.program_history(sv)["steady"]
    assert (history.restarts, history.last_exit, history.gave_up) == (3, "terminated by SIGKILL; not expected", False)


def test_status_shows_restarts_and_last_exit_and_fails_on_fatal(sv: Settings,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    supervisor.start_program(sv, "steady")
    supervisor.start_program(sv, "crashy")
    pid = _wait_for(sv, "steady", lambda i: i.get("statename") == "RUNNING")["pid"]
    os.kill(pid, signal.SIGKILL)
    _wait_for(sv, "steady", lambda i: i.get("statename") == "RUNNING" and i["pid"] != pid)
    _wait_for(sv, "crashy", lambda i: i.get("statename") == "FATAL")

    report = manager.status(sv)
    assert report["ok"] is False
    crashy, steady = report["services"]["crashy"], report["services"]["steady"]
    assert crashy["healthy"] is False and crashy["pid"] is None
    assert crashy["detail"].startswith("crashy is FATAL") and "exit status 3" in crashy["detail"]
    assert str(sv.log_dir / "crashy.log") in crashy["detail"] and "lake stack up" in crashy["detail"]
    assert steady["healthy"] is True and steady["detail"] == "probe ok"
    prog = steady["programs"]["steady"]
    assert (prog["state"], prog["restarts"], prog["last_exit"]) == ("RUNNING", 1, "terminated by SIGKILL; not expected")
    assert isinstance(prog["uptime_s"], int) and prog["pid"] not in (None, pid)
    # The stream is supervised too; never started is not a failure.
    assert (report["stream"]["state"], report["stream"]["healthy"]) == ("STOPPED", True)

    umask = os.umask(0o022)
    try:
        assert cli.main(["stack", "status"]) == 1
    finally:
        os.umask(umask)
    out = capsys.readouterr().out
    assert "crashy         DOWN" in out and "steady         healthy" in out
    assert any(line.split()[:2] == ["steady", "RUNNING"] and line.split()[4] == "1"
               and line.endswith(" terminated by SIGKILL; not expected") for line in out.splitlines()), out
    assert any(line.split()[:2] == ["stream", "STOPPED"] for line in out.splitlines()), out


def test_status_warns_on_low_disk_without_failing(sv: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    supervisor.start_program(sv, "steady")
    _wait_for(sv, "steady", lambda i: i.get("statename") == "RUNNING")
    free_mb = __import__("shutil").disk_usage(sv.state_dir).free // (1024 * 1024)
    low = load_settings({"LAKE_STATE_DIR": str(sv.state_dir), "LAKE_STACK_MIN_FREE_DISK_MB": str(free_mb + 10**6)})
    monkeypatch.setattr(manager, "services", lambda s: SERVICES[1:])
    report = manager.status(low)
    assert report["ok"] is True and report["disk"]["ok"] is False
    assert len(report["warnings"]) == 1 and "LAKE_STACK_MIN_FREE_DISK_MB" in report["warnings"][0]
    assert any(line.startswith("WARNING: low disk") for line in manager.format_status(report))
    assert manager.status(sv)["warnings"] == []


def test_connect_probe_names_a_failed_task_and_its_first_trace_line() -> None:
    statuses: dict[str, Any] = {"shop-postgres": {"status": {
        "connector": {"state": "RUNNING"},
        "tasks": [{"id": 0, "state": "FAILED",
                   "trace": "org.apache.kafka.connect.errors.ConnectException: slot lost\n\tat x.y(Z.java:1)"}]}},
        "other": {"status": {"connector": {"state": "RUNNING"}, "tasks": [{"id": 0, "state": "RUNNING"}]}}}
    assert health.connector_failures(statuses) == [
        "shop-postgres task 0 FAILED: org.apache.kafka.connect.errors.ConnectException: slot lost"]
    statuses["shop-postgres"]["status"]["tasks"][0]["state"] = "RUNNING"
    assert health.connector_failures(statuses) == []


def test_history_counts_only_since_the_last_daemon_start(tmp_path: Path) -> None:
    settings = load_settings({"LAKE_STATE_DIR": str(tmp_path)})
    settings.log_dir.mkdir(parents=True)
    (settings.log_dir / "supervisord.log").write_text(
        "2026-01-01 00:00:00,000 INFO supervisord started with pid 1\n"
        "2026-01-01 00:00:01,000 INFO spawned: 'stream' with pid 10\n"
        "2026-01-01 00:00:02,000 INFO exited: stream (terminated by SIGKILL; not expected)\n"
        "2026-01-01 00:00:03,000 INFO spawned: 'stream' with pid 11\n"
        "2026-01-02 00:00:00,000 INFO supervisord started with pid 2\n"
        "2026-01-02 00:00:01,000 INFO spawned: 'stream' with pid 20\n"
        "2026-01-02 00:00:05,000 INFO stopped: stream (exit status 0)\n"
        "2026-01-02 00:00:06,000 INFO spawned: 'stream' with pid 21\n"
        "2026-01-02 00:00:07,000 INFO exited: kafka (exit status 1; not expected)\n"
        "2026-01-02 00:00:08,000 INFO spawned: 'kafka' with pid 30\n")
    history = supervisor.program_history(settings)
    assert (history["stream"].restarts, history["stream"].last_exit) == (0, "stopped: exit status 0")
    assert (history["kafka"].restarts, history["kafka"].last_exit) == (1, "exit status 1; not expected")
