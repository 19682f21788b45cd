"""Every DAG imports cleanly, has tags and retries, and does no I/O at parse time."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest

DAGS_DIR = Path(__file__).resolve().parents[2] / "dags"
DAG_FILES = sorted(p for p in DAGS_DIR.glob("*.py") if not p.name.startswith("_"))


@pytest.fixture(scope="module")
def dagbag(tmp_path_factory: pytest.TempPathFactory) -> Any:
    import os

    home = tmp_path_factory.mktemp("airflow_home")
    os.environ.setdefault("AIRFLOW_HOME", str(home))
    os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
    from airflow.dag_processing.dagbag import DagBag

    # Parse-time network access is a bug: make any connection attempt fail loudly.
    real_connect = socket.socket.connect

    def refuse(self: socket.socket, address: Any) -> None:
        raise AssertionError(f"DAG parsing opened a network connection to {address}")

    socket.socket.connect = refuse  # type: ignore[method-assign,assignment]
    try:
        return DagBag(dag_folder=str(DAGS_DIR))
    finally:
        socket.socket.connect = real_connect  # type: ignore[method-assign]


def test_there_are_dags() -> None:
    assert DAG_FILES, "no DAG files found"


def test_no_import_errors(dagbag: Any) -> None:
    assert dagbag.import_errors == {}


def test_every_file_defines_a_dag(dagbag: Any) -> None:
    files = {Path(d.fileloc).name for d in dagbag.dags.values()}
    assert {p.name for p in DAG_FILES} <= files


@pytest.mark.parametrize("dag_file", [p.name for p in DAG_FILES])
def test_dag_has_tags_retries_docs(dagbag: Any, dag_file: str) -> None:
    dags = [d for d in dagbag.dags.values() if Path(d.fileloc).name == dag_file]
    assert dags
    for dag in dags:
        assert dag.tags, f"{dag.dag_id} has no tags"
        assert dag.doc_md, f"{dag.dag_id} has no doc_md"
        assert dag.start_date is not None and dag.start_date.tzinfo is not None
        for task in dag.tasks:
            assert task.retries >= 2, f"{dag.dag_id}.{task.task_id} retries={task.retries}"


def test_dags_do_not_read_variables_or_connections_at_parse_time() -> None:
    for path in DAG_FILES:
        text = path.read_text()
        for forbidden in ("Variable.get(", "get_connection(", "BaseHook.get", "requests.", "SparkSession"):
            assert forbidden not in text, f"{path.name} uses {forbidden} at module level"
