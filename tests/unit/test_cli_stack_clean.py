"""``lake stack clean``: deletes the state dir LAKE_STATE_DIR names, only when confirmed (no stack running)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from spark_jobs import cli
from spark_jobs.cli import stack as stack_cli


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    state = tmp_path / ".lake"
    (state / "conf").mkdir(parents=True)
    (state / "data" / "minio").mkdir(parents=True)
    (state / ".env").write_text("LAKE_PG_PASSWORD=secret\n")
    return state


@pytest.fixture(autouse=True)
def _keep_umask_and_logging(keep_umask_and_logging: None) -> None:
    """``lake`` sets umask 077 and its console logging for the process: tests/conftest.py restores them."""


def _clean(state: Path, *args: str, tty: bool, answer: str | None = None, monkeypatch: pytest.MonkeyPatch) -> Result:
    monkeypatch.setattr(stack_cli, "_interactive", lambda: tty)
    return CliRunner().invoke(cli.lake, ["stack", "clean", *args], input=answer, env={"LAKE_STATE_DIR": str(state)},
                              standalone_mode=False)


def test_not_on_a_terminal_it_refuses_without_yes_and_deletes_nothing(state_dir, monkeypatch) -> None:
    result = _clean(state_dir, tty=False, monkeypatch=monkeypatch)
    assert result.return_value == 2
    assert "every secret" in result.output and "--yes" in result.output and "FORCE=1" in result.output
    assert (state_dir / ".env").exists()


def test_on_a_terminal_it_asks_naming_secrets_and_data_and_no_keeps_everything(state_dir, monkeypatch) -> None:
    result = _clean(state_dir, tty=True, answer="n\n", monkeypatch=monkeypatch)
    assert result.return_value == 1
    assert f"Delete {state_dir}?" in result.output and "every secret" in result.output and "all data" in result.output
    assert (state_dir / ".env").exists() and (state_dir / "data" / "minio").is_dir()


def test_on_a_terminal_yes_deletes_the_state_dir(state_dir, monkeypatch) -> None:
    result = _clean(state_dir, tty=True, answer="y\n", monkeypatch=monkeypatch)
    assert result.exception is None and result.return_value == 0, result.output
    assert not state_dir.exists()


def test_yes_deletes_the_dir_lake_state_dir_names_and_nothing_beside_it(state_dir, monkeypatch) -> None:
    sibling = state_dir.parent / ".lake-cluster"
    (sibling / "conf").mkdir(parents=True)
    result = _clean(state_dir, "--yes", tty=False, monkeypatch=monkeypatch)
    assert result.exception is None and result.return_value == 0, result.output
    assert not state_dir.exists() and (sibling / "conf").is_dir()


def test_a_folder_that_is_not_a_state_dir_is_refused(tmp_path, monkeypatch) -> None:
    (tmp_path / "thesis.tex").write_text("years of work")
    result = _clean(tmp_path, "--yes", tty=False, monkeypatch=monkeypatch)
    assert result.return_value == 2 and "does not look like a Lakestream state dir" in result.output
    assert (tmp_path / "thesis.tex").exists()


def test_the_checkout_itself_is_refused(monkeypatch) -> None:
    from spark_jobs.settings import REPO_ROOT

    result = _clean(REPO_ROOT, "--yes", tty=False, monkeypatch=monkeypatch)
    assert result.return_value == 2 and "the checkout" in result.output
    assert (REPO_ROOT / "pyproject.toml").exists()


def test_a_missing_state_dir_is_nothing_to_do(tmp_path, monkeypatch) -> None:
    result = _clean(tmp_path / "absent", "--yes", tty=False, monkeypatch=monkeypatch)
    assert result.return_value == 0 and "nothing to delete" in result.output
