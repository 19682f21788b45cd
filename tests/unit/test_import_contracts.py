"""The package's import contracts (pyproject ``[tool.importlinter]``, run by ``make lint``): kept by the tree, and
broken, naming the import, when a data-plane module imports the operations side or two modules import each other."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def _lint(root: Path) -> subprocess.CompletedProcess[str]:
    """lint-imports with the repository's contracts over the package copied under ``root``."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([str(LINT_IMPORTS), "--no-cache", str(REPO / "pyproject.toml")], cwd=root,
                          env=env, capture_output=True, text=True, check=False, timeout=300)


@pytest.fixture
def package(tmp_path: Path) -> Path:
    shutil.copytree(REPO / "spark_jobs", tmp_path / "spark_jobs", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def test_the_tree_keeps_the_contracts(package: Path) -> None:
    result = _lint(package)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "the data plane does not import operations KEPT" in result.stdout
    assert "no import circles, at any depth of the package KEPT" in result.stdout


def test_a_transform_importing_the_launcher_breaks_the_build(package: Path) -> None:
    (package / "spark_jobs" / "silver" / "probe.py").write_text("from spark_jobs.stack import supervisor\n")
    result = _lint(package)
    assert result.returncode == 1
    assert "the data plane does not import operations BROKEN" in result.stdout
    assert "spark_jobs.silver.probe -> spark_jobs.stack.supervisor" in result.stdout


def test_an_import_circle_breaks_the_build(package: Path) -> None:
    # silver.cdc imports silver.cdc_columns; the other way round closes a circle (as the parse once did).
    path = package / "spark_jobs" / "silver" / "cdc_columns.py"
    path.write_text(path.read_text() + "\nfrom spark_jobs.silver import cdc  # noqa: E402\n")
    result = _lint(package)
    assert result.returncode == 1
    assert "no import circles, at any depth of the package BROKEN" in result.stdout
    assert "No cycles are allowed in spark_jobs.silver" in result.stdout


def test_a_delta_write_outside_table_io_breaks_the_build(package: Path) -> None:
    (package / "spark_jobs" / "gold" / "probe.py").write_text("from delta.tables import DeltaTable\n")
    result = _lint(package)
    assert result.returncode == 1
    assert "only table_io writes Delta (no other module imports a Delta engine) BROKEN" in result.stdout
    assert "spark_jobs.gold.probe -> delta (l.1)" in result.stdout


def test_the_delta_contract_covers_every_module_but_table_io() -> None:
    """A new top-level module or package must be listed in the contract (or it could write Delta unseen)."""
    import tomllib

    contracts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    (delta,) = [c for c in contracts if c.get("forbidden_modules") == ["delta", "deltalake"]]
    top = {p.stem for p in (REPO / "spark_jobs").iterdir()
           if (p.suffix == ".py" and p.stem != "__init__") or (p.is_dir() and not p.name.startswith("__"))}
    assert {m.removeprefix("spark_jobs.") for m in delta["source_modules"]} == top - {"table_io"}
