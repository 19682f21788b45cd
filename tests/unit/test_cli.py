"""The `lake` CLI: generated help for every command, option parsing and errors (no services)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import click
import pytest

from spark_jobs import cli, logs


@pytest.fixture(autouse=True)
def _keep_umask_and_logging(keep_umask_and_logging: None) -> None:
    """``cli.main`` sets umask 077 and lake's console logging for the process: tests/conftest.py restores them."""


def _commands(group: click.Group, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], click.Command]]:
    found: list[tuple[tuple[str, ...], click.Command]] = [(path, group)]
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            found += _commands(command, (*path, name))
        else:
            found.append(((*path, name), command))
    return found


COMMANDS = _commands(cli.lake)


def test_the_tree_has_every_documented_command() -> None:
    paths = {" ".join(p) for p, _ in COMMANDS}
    for expected in ("stack up", "stack down", "stack clean", "stack status", "stack logs", "connectors apply",
                     "connectors status",
                     "stream run", "stream start", "stream stop", "stream status", "stream wait", "loadgen cdc",
                     "loadgen events", "loadgen history", "bench cdc", "bench events", "bench gold", "bench dq",
                     "gold build", "gold backfill", "dq status", "dq history", "dq run", "reconcile events",
                     "verify cdc", "sql", "job smoke", "settings"):
        assert expected in paths, sorted(paths)


@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=[" ".join(p) or "lake" for p, _ in COMMANDS])
def test_every_command_prints_generated_help(path: tuple[str, ...], command: click.Command,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([*path, "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"Usage: lake {' '.join(path)}".rstrip()), out
    for param in command.params:
        for opt in param.opts if isinstance(param, click.Option) else []:
            assert opt in out, f"{opt} missing from the help of lake {' '.join(path)}:\n{out}"
    if isinstance(command, click.Group):
        for name in command.commands:
            assert name in out


@pytest.mark.parametrize("module", ["spark_jobs.streaming.app", "spark_jobs.quality.docs_server",
                                    "spark_jobs.jobs.demo_summary", "spark_jobs.jobs.smoke"])
def test_programs_run_outside_lake_have_help_too(module: str) -> None:
    """The supervised programs, make demo's summary and the DAG's spark-submit file parse options with Click."""
    import importlib

    from click.testing import CliRunner

    mod = importlib.import_module(module)
    command = getattr(mod, "command", None) or mod.main
    result = CliRunner().invoke(command, ["--help"])
    assert result.exit_code == 0 and result.output.startswith("Usage: "), result.output
    assert CliRunner().invoke(command, ["--no-such-option"]).exit_code == 2


def test_short_help_flag_and_a_leading_double_dash(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["stack", "-h"]) == 0
    assert "Usage: lake stack" in capsys.readouterr().out
    # Scripts of the old pass-through CLI put `--` before a module's options: still accepted.
    assert cli.main(["loadgen", "events", "--", "--help"]) == 0
    assert "--users-from-db" in capsys.readouterr().out


@pytest.mark.parametrize(("argv", "needle"), [
    (["loadgen", "nosuch", "--rate", "1"], "nosuch"),
    (["stack", "status", "--no-such-flag"], "--no-such-flag"),
    (["loadgen", "cdc", "--duration", "1"], "--rate"),
    (["loadgen", "cdc", "--rate", "1", "--duration", "1", "--connections", "0"], "--connections must be >= 1"),
    (["loadgen", "events", "--rate", "10", "--duration", "1", "--users", "5", "--users-from-db"], "exclude each other"),
    (["loadgen", "history", "--end-date", "10.3.2026"], "YYYY-MM-DD"),
    (["job", "smoke", "--rows", "0"], "--rows must be >= 1"),
    (["bench", "gold", "--scales", "1,x"], "whole numbers >= 1"),
    (["bench", "gold", "--days", "0"], "--days must be >= 1"),
    (["bench", "dq", "--tables", "silver.nope"], "no benchmark for silver.nope"),
    (["bench", "cdc", "--driver", "other"], "supervised"),
    (["gold", "backfill", "--start", "2026-03-10", "--end", "2026-03-09"], "is before --start"),
    (["gold", "backfill", "--start", "2026-03-10", "--end", "2026-03-11", "--reprocess", "all"], "completed"),
    (["gold", "build", "--start", "2026-03-10", "--tables", "fct_nope"], "no gold table fct_nope"),
    (["sql", "--format", "xml"], "json"),
    (["dq", "run"], "--table"),
    (["reconcile", "events", "--manifest", "/no/such/manifest.json"], "no such file"),
])
def test_a_wrong_option_is_a_usage_error_naming_it(argv: list[str], needle: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert needle in err and "Usage: lake" in err, err


def test_loadgen_events_rejects_no_users(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["loadgen", "events", "--rate", "10", "--duration", "1", "--users", "0"]) == 2
    assert "lake loadgen events: --users must be >= 1" in capsys.readouterr().err


def test_gold_build_names_a_bad_day(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["gold", "build", "--start", "2026-13-01"]) == 2
    assert capsys.readouterr().err.startswith("lake gold build: ")


def test_command_results_reach_the_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    """A command's return value is lake's exit code (``lake stream wait`` times out: 1)."""
    from spark_jobs import settings
    from spark_jobs.stack import stream_control as control

    monkeypatch.setattr(settings, "load_settings", lambda: object())
    monkeypatch.setattr(control, "wait", lambda s, timeout, progress=None: timeout > 5)
    assert cli.main(["stream", "wait", "--timeout", "1"]) == 1
    assert cli.main(["stream", "wait", "--timeout", "10"]) == 0


def test_with_json_stdout_holds_only_the_json(monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from spark_jobs import settings
    from spark_jobs.stack import stream_control as control

    def report(settings: object) -> dict[str, Any]:
        logging.getLogger("spark_jobs.stack.stream_control").info("reading the status files")
        return {"running": True, "pid": 1, "last_batch": 3, "committed_at": None, "tables": {}}

    monkeypatch.setattr(settings, "load_settings", lambda: object())
    monkeypatch.setattr(control, "report", report)
    assert cli.main(["stream", "status", "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["last_batch"] == 3 and err == "reading the status files\n"
    assert cli.main(["stream", "status"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("reading the status files\nstream RUNNING pid=1 last_batch=3") and err == ""


def test_logging_shows_lake_records_as_plain_lines(capsys: pytest.CaptureFixture[str]) -> None:
    logs.setup()
    logging.getLogger("spark_jobs.some.module").info("lake stream: query %s running", "lake_cdc")
    logging.getLogger("spark_jobs.some.module").debug("hidden unless verbose")
    logging.getLogger("py4j.clientserver").info("chatter of a library")
    logging.getLogger("__main__").info("a module run with python -m")
    logging.getLogger("spark_jobs.x").warning("DQ trend page not rebuilt: %s", "boom")
    out, err = capsys.readouterr()
    assert out == "lake stream: query lake_cdc running\na module run with python -m\n"
    assert err == "WARNING: DQ trend page not rebuilt: boom\n"
    logs.setup(verbose=True)
    logs.progress_to_stderr()
    logging.getLogger("spark_jobs.x").debug("now shown")
    assert capsys.readouterr() == ("", "now shown\n")
    assert sum(isinstance(h, logs.ConsoleHandler) for h in logging.getLogger().handlers) == 1


def test_progress_bars_stay_off_without_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    from spark_jobs.cli import progress

    assert not progress.enabled()
    with progress.steps("work", 3) as advance:
        advance(2)
    with progress.timed("load", 0.01):
        pass
    with progress.remaining("records") as left:
        left(5)
    assert capsys.readouterr() == ("", "")


def test_progress_bars_on_a_terminal_draw_and_finish(monkeypatch: pytest.MonkeyPatch) -> None:
    from spark_jobs.cli import progress

    monkeypatch.setattr(progress, "enabled", lambda: True)
    with progress.steps("work", 3) as advance:
        advance(3)
    with progress.remaining("records") as left:
        left(5)
        left(0)
    with progress.timed("load", 0.3):
        pass


def test_lake_sql_names_the_connect_server_and_the_fix_when_it_is_down(tmp_path: Any) -> None:
    """``lake sql`` runs on the stack's Spark Connect server; with nothing on its port it fails at once (pyspark's
    own client would retry for minutes), naming the address, the service and both ways out."""
    import socket
    import subprocess
    import sys

    with socket.socket() as probe:  # a free port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {"PATH": "/usr/bin:/bin", "LAKE_STATE_DIR": str(tmp_path), "LAKE_SPARK_CONNECT_PORT": str(port)}
    # (a client that waited on the port instead would hit the timeout: pyspark's retries run for minutes)
    # main(), not the console script's entry(): run by root, that first switches to the service user (own tests).
    proc = subprocess.run([sys.executable, "-c", "from spark_jobs.cli import main; raise SystemExit(main())", "sql",
                           "-e", "SELECT 1"], env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode != 0
    assert f"127.0.0.1:{port}" in proc.stderr and "spark-connect" in proc.stderr, proc.stderr
    assert "lake stack up" in proc.stderr and "lake sql --local" in proc.stderr, proc.stderr


def test_shell_completion_offers_commands_and_options(monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """bash: eval "$(_LAKE_COMPLETE=bash_source lake)" (Click's completion, nothing of ours)."""

    def complete(words: str) -> list[str]:
        monkeypatch.setenv("_LAKE_COMPLETE", "bash_complete")
        monkeypatch.setenv("COMP_WORDS", words)
        monkeypatch.setenv("COMP_CWORD", str(len(words.split()) - 1))
        with pytest.raises(SystemExit) as exc:
            cli.lake.main(args=[], prog_name="lake")
        assert exc.value.code == 0
        return [line.split(",", 1)[1] for line in capsys.readouterr().out.splitlines()]

    assert complete("lake st") == ["stack", "stream"]
    assert complete("lake loadgen events --ra") == ["--rate"]


def test_a_manifest_the_user_cannot_write_is_refused_before_the_load(monkeypatch: pytest.MonkeyPatch,
                                                                      tmp_path: Path) -> None:
    import importlib

    loadgen = importlib.import_module("spark_jobs.cli.loadgen")  # the package's `loadgen` attribute is the group
    monkeypatch.setattr(loadgen.os, "access", lambda path, mode: False)
    with pytest.raises(ValueError, match=r"--manifest .*m\.json: OS user \w+ cannot write to .*LAKE_SERVICE_USER"):
        loadgen._check_writable(tmp_path / "sub" / "m.json")


def test_settings_example_prints_the_env_example_text() -> None:
    from click.testing import CliRunner

    from spark_jobs.cli import lake
    from spark_jobs.settings import env_example

    result = CliRunner().invoke(lake, ["settings", "--example"])
    assert result.exit_code == 0, result.output
    assert result.output == env_example.render()
    assert "LAKE_HOST=" in result.output
