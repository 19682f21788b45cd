"""``stop_program`` against a recording stand-in for supervisord's XML-RPC API (no supervisord)."""

from __future__ import annotations

import xmlrpc.client
from pathlib import Path
from typing import Any

import pytest

from spark_jobs.settings import load_settings
from spark_jobs.stack import supervisor
from spark_jobs.stack.errors import StackError
from spark_jobs.stack.supervisor import stop_program


class FakeSupervisor:
    def __init__(self, states: list[str], not_running: bool = False) -> None:
        self.states = states
        self.not_running = not_running
        self.calls: list[tuple[str, Any]] = []

    def stopProcess(self, name: str, wait: bool) -> bool:
        self.calls.append(("stop", wait))
        if self.not_running:
            raise xmlrpc.client.Fault(70, "NOT_RUNNING: stream")
        return True

    def getProcessInfo(self, name: str) -> dict[str, str]:
        state = self.states.pop(0) if len(self.states) > 1 else self.states[0]
        self.calls.append(("info", state))
        return {"statename": state}


@pytest.fixture
def settings(tmp_path: Path) -> Any:
    return load_settings({"LAKE_STATE_DIR": str(tmp_path)})


def test_stop_asks_without_waiting_then_polls_until_stopped(settings, monkeypatch) -> None:
    fake = FakeSupervisor(["STOPPING", "STOPPING", "STOPPED"])
    monkeypatch.setattr(supervisor, "rpc", lambda s: fake)
    stop_program(settings, "stream", poll=0)
    assert fake.calls == [("stop", False), ("info", "STOPPING"), ("info", "STOPPING"), ("info", "STOPPED")]


def test_stop_of_a_program_not_running_returns_at_once(settings, monkeypatch) -> None:
    fake = FakeSupervisor(["STOPPED"], not_running=True)
    monkeypatch.setattr(supervisor, "rpc", lambda s: fake)
    stop_program(settings, "stream", poll=0)
    assert fake.calls == [("stop", False)]


def test_a_program_that_does_not_stop_names_itself_and_its_state(settings, monkeypatch) -> None:
    monkeypatch.setattr(supervisor, "rpc", lambda s: FakeSupervisor(["STOPPING"]))
    with pytest.raises(StackError, match=r"stream is still STOPPING 0s after the stop request"):
        stop_program(settings, "stream", timeout=0.05, poll=0.01)


def test_is_supervisord_matches_the_command_line_of_a_live_process(settings) -> None:
    """The pid file's process counts as our supervisord only while alive with ``supervisord`` in its argv."""
    import subprocess
    import sys

    daemon = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "-m", "supervisor.supervisord"])
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert supervisor.is_supervisord(daemon.pid)
        assert not supervisor.is_supervisord(other.pid)
        supervisor.pid_path(settings).parent.mkdir(parents=True, exist_ok=True)
        supervisor.pid_path(settings).write_text(f"{daemon.pid}\n")
        assert supervisor.daemon_pid(settings) == daemon.pid
    finally:
        for p in (daemon, other):
            p.kill()
            p.wait()
    assert not supervisor.is_supervisord(daemon.pid) and not supervisor.is_supervisord(0)
    assert not supervisor.is_supervisord(-1)
    # Not running any more: the stale pid file and socket are removed.
    supervisor.socket_path(settings).write_text("")
    assert supervisor.daemon_pid(settings) is None
    assert not supervisor.pid_path(settings).exists() and not supervisor.socket_path(settings).exists()


def test_shutdown_waits_until_supervisord_has_exited(settings, monkeypatch) -> None:
    import subprocess
    import sys

    daemon = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "supervisord"])

    class Daemon:
        def __init__(self, exits: bool) -> None:
            self.exits = exits

        def shutdown(self) -> bool:
            if self.exits:
                daemon.kill()  # exits; left unreaped like supervisord is (not our child): its argv is gone
            return True

    try:
        monkeypatch.setattr(supervisor, "daemon_pid", lambda s: daemon.pid)
        supervisor.pid_path(settings).parent.mkdir(parents=True, exist_ok=True)
        supervisor.pid_path(settings).write_text(f"{daemon.pid}\n")
        monkeypatch.setattr(supervisor, "rpc", lambda s: Daemon(exits=False))
        with pytest.raises(StackError, match=rf"supervisord \(pid {daemon.pid}\) did not exit within 0s"):
            supervisor.shutdown(settings, timeout=0.1)
        assert supervisor.pid_path(settings).exists()
        monkeypatch.setattr(supervisor, "rpc", lambda s: Daemon(exits=True))
        supervisor.shutdown(settings, timeout=30)
        assert not supervisor.pid_path(settings).exists()
    finally:
        daemon.kill()
        daemon.wait()
