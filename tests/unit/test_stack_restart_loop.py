"""A stream that keeps restarting is a failure in ``lake stack status`` (issue 32), even though each run outlives
supervisord's start time (so supervisord restarts it forever and shows it RUNNING).

The decision is fed fake restart histories; ``status`` and the CLI run on a fake supervisord log and program state.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from spark_jobs import cli
from spark_jobs.settings import Settings, load_settings
from spark_jobs.stack import manager, supervisor

NOW = datetime(2025, 3, 1, 12, 0, 0)
PROG = {"last_exit": "exit status 1; not expected", "log": "<state>/logs/stream.log"}


def _times(*minutes_ago: float) -> list[datetime]:
    return [NOW - timedelta(minutes=m) for m in sorted(minutes_ago, reverse=True)]


@pytest.mark.parametrize(("times", "failed"), [
    (_times(), False),
    (_times(9, 6, 3), False),  # exactly N=3: not more than N
    (_times(4, 3, 2, 1, 0), True),  # the issue: 5 restarts in 4 minutes
    (_times(9.9, 6, 3, 0.1), True),
    (_times(40, 30, 20, 11, 5), False),  # as many, but spread over an hour: not a loop now
])
def test_more_than_n_restarts_in_m_minutes_is_a_failure(times: list[datetime], failed: bool) -> None:
    reason = manager.restart_loop_failure("stream", PROG, times, NOW, 3, 10, "OverflowError: int too big to convert")
    assert (reason is not None) == failed
    if reason:
        assert reason.startswith(f"stream keeps restarting: {len(times)} restarts after unexpected exits in the last "
                                 "10 minutes (more than LAKE_STREAM_MAX_RESTARTS=3")
        assert "last error: OverflowError: int too big to convert" in reason and "<state>/logs/stream.log" in reason


def test_the_limits_come_from_settings() -> None:
    times = _times(2, 1)
    assert manager.restart_loop_failure("stream", PROG, times, NOW, 1, 10, None) is not None
    assert manager.restart_loop_failure("stream", PROG, times, NOW, 2, 10, None) is None
    assert manager.restart_loop_failure("stream", PROG, times, NOW, 1, 1, None) is None
    # No error in the log: supervisord's last exit is named instead.
    reason = manager.restart_loop_failure("stream", PROG, times, NOW, 1, 10, None)
    assert reason is not None and "last error: last exit: exit status 1; not expected" in reason


STREAM_LOG = """\
2025-03-01 11:58:00 INFO lake stream: query lake_cdc (abc) running
2025-03-01 11:58:30 ERROR lake stream: query lake_cdc failed: [STREAM_FAILED] Query [id = 1, runId = 2] terminated \
with exception: An exception was thrown from the Python worker.
Traceback (most recent call last):
  File "/x/spark_jobs/silver/cdc_parse.py", line 300, in changes_table
    arrays.append(pa.array(values, f.type))
OverflowError: int too big to convert
org.apache.spark.api.python.PythonException: Traceback (most recent call last):
\tat org.apache.spark.api.python.BasePythonRunner.handlePythonException(PythonRunner.scala:1)
"""


def test_last_error_is_the_failed_query_and_its_python_cause(tmp_path: Path) -> None:
    log = tmp_path / "stream.log"
    log.write_text("old noise\nValueError: an older error\n" + STREAM_LOG)
    error = manager.last_error(log)
    assert error is not None
    assert error.startswith("lake stream: query lake_cdc failed: [STREAM_FAILED] Query")
    assert error.endswith("(cause: OverflowError: int too big to convert)")
    log.write_text("line\nKeyError: 'x'\nmore\n")
    assert manager.last_error(log) == "KeyError: 'x'"
    log.write_text("all fine\n")
    assert manager.last_error(log) is None
    assert manager.last_error(tmp_path / "missing.log") is None


def _supervisord_log(restarts_minutes_ago: list[float], now: datetime) -> str:
    """supervisord's log of a stream that ran past its 45 s start time and then exited, again and again."""
    def at(minutes: float) -> str:
        return (now - timedelta(minutes=minutes)).strftime("%Y-%m-%d %H:%M:%S") + ",123"

    first = max(restarts_minutes_ago, default=1) + 1
    lines = [f"{at(first + 1)} INFO supervisord started with pid 100",
             f"{at(first)} INFO spawned: 'stream' with pid 200"]
    for i, m in enumerate(sorted(restarts_minutes_ago, reverse=True)):
        lines += [f"{at(m + 0.5)} INFO success: stream entered RUNNING state, process has stayed up for > than 45 "
                  "seconds (startsecs)",
                  f"{at(m + 0.01)} WARN exited: stream (exit status 1; not expected)",
                  f"{at(m)} INFO spawned: 'stream' with pid {201 + i}"]
    return "\n".join(lines) + "\n"


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    monkeypatch.setenv("LAKE_STATE_DIR", str(tmp_path))
    settings = load_settings({"LAKE_STATE_DIR": str(tmp_path)})
    settings.log_dir.mkdir(parents=True, exist_ok=True)
    running: dict[str, Any] = {"statename": "RUNNING", "pid": 4242, "start": 0, "now": 60}
    monkeypatch.setattr(manager, "services", lambda s: [])
    monkeypatch.setattr(supervisor, "daemon_pid", lambda s: 100)
    monkeypatch.setattr(supervisor, "program_info", lambda s, name: dict(running))
    return settings


def test_program_history_keeps_each_restarts_time(state: Settings) -> None:
    now = datetime.now().replace(microsecond=0)
    (state.log_dir / "supervisord.log").write_text(_supervisord_log([4, 3, 2, 1, 0], now))
    history = supervisor.program_history(state)["stream"]
    assert history.restarts == 5 and history.gave_up is False
    assert history.restart_times == [now - timedelta(minutes=m) for m in (4, 3, 2, 1, 0)]


def test_status_fails_naming_the_last_error_while_supervisord_says_running(
        state: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    (state.log_dir / "supervisord.log").write_text(_supervisord_log([4, 3, 2, 1, 0], datetime.now()))
    (state.log_dir / "stream.log").write_text(STREAM_LOG)
    report = manager.status(state)
    stream = report["stream"]
    assert report["ok"] is False and stream["healthy"] is False
    assert (stream["state"], stream["restarts"], stream["recent_restarts"]) == ("RUNNING", 5, 5)
    assert stream["detail"].startswith("stream keeps restarting: 5 restarts")
    assert "cause: OverflowError: int too big to convert" in stream["detail"]
    assert cli.main(["stack", "status"]) == 1
    out = capsys.readouterr().out
    assert any(line.split()[:2] == ["stream", "FAILED"] and "keeps restarting" in line for line in out.splitlines())


def test_status_is_ok_with_few_or_old_restarts(state: Settings) -> None:
    (state.log_dir / "supervisord.log").write_text(_supervisord_log([50, 40, 30, 20, 2], datetime.now()))
    report = manager.status(state)
    assert report["ok"] is True and report["stream"]["healthy"] is True
    assert (report["stream"]["restarts"], report["stream"]["recent_restarts"]) == (5, 1)
