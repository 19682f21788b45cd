"""The `lake` CLI hands a module's own options to it verbatim (no services)."""

from __future__ import annotations

from typing import Any

import pytest

from spark_jobs import cli


@pytest.fixture(autouse=True)
def _keep_umask() -> Any:
    """``cli.main`` sets umask 077 for the process (what lake writes is private); give the next test its own."""
    import os

    old = os.umask(0o077)
    os.umask(old)
    yield
    os.umask(old)


@pytest.mark.parametrize("argv, expected", [
    (["loadgen", "events", "--rate", "10", "--duration", "1"], ["--rate", "10", "--duration", "1"]),
    (["loadgen", "events", "--", "--rate", "10"], ["--rate", "10"]),
    (["loadgen", "events"], []),
])
def test_options_after_the_kind_reach_the_module(monkeypatch: pytest.MonkeyPatch, argv: list[str],
                                                 expected: list[str]) -> None:
    from spark_jobs.loadgen import events

    seen: list[Any] = []

    def fake_main(args: list[str]) -> int:
        seen.append(list(args))
        return 0

    monkeypatch.setattr(events, "main", fake_main)
    assert cli.main(argv) == 0
    assert seen == [expected]


def test_unknown_kind_is_still_an_argparse_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["loadgen", "nosuch", "--rate", "1"])
    assert exc.value.code == 2
    assert "nosuch" in capsys.readouterr().err


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
    proc = subprocess.run([sys.executable, "-m", "spark_jobs.cli", "sql", "-e", "SELECT 1"], env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode != 0
    assert f"127.0.0.1:{port}" in proc.stderr and "spark-connect" in proc.stderr, proc.stderr
    assert "lake stack up" in proc.stderr and "lake sql --local" in proc.stderr, proc.stderr
