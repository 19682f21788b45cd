"""Which processes ``lake stack down`` treats as its own: real processes, two state dirs, one a prefix of the other.

``/tmp/x/.lake`` is a string prefix of ``/tmp/x/.lake-cluster``; stopping the first must never select the second.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from spark_jobs.stack.manager import owned_by, stack_processes
from spark_jobs.stack.supervisor import OWNER_ENV

LAKE = Path("/tmp/x/.lake")
CLUSTER = Path("/tmp/x/.lake-cluster")


@pytest.fixture
def spawn() -> Iterator[object]:
    procs: list[subprocess.Popen[bytes]] = []

    def start(*args: str, owner: Path | None = None) -> subprocess.Popen[bytes]:
        env = {k: v for k, v in os.environ.items() if k != OWNER_ENV}
        if owner is not None:
            env[OWNER_ENV] = str(owner)
        # The extra arguments land in the process's argv (sys.argv[1:]), as a service's config paths do.
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", *args], env=env)
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()


def _selected(state_dir: Path) -> set[int]:
    return {p.pid for p in stack_processes(state_dir)}


def test_down_of_lake_selects_its_process_and_not_the_cluster_ones(spawn) -> None:
    ours = spawn(f"{LAKE}/conf/kafka.properties")
    theirs = spawn(f"{CLUSTER}/conf/kafka.properties")
    theirs_bare = spawn(str(CLUSTER))

    selected = _selected(LAKE)
    assert ours.pid in selected
    assert theirs.pid not in selected and theirs_bare.pid not in selected
    assert ours.pid not in _selected(CLUSTER) and theirs.pid in _selected(CLUSTER)


def test_the_state_dir_as_an_option_value_or_class_path_entry_is_found(spawn) -> None:
    option = spawn(f"-Dlog4j2.configurationFile={LAKE}/conf/log4j2/kafka.yaml")
    class_path = spawn("-cp", f"/var/cache/lakestream/jars/spark/a.jar:{LAKE}/conf/hive")
    other_option = spawn(f"-Dlog4j2.configurationFile={CLUSTER}/conf/log4j2/kafka.yaml")

    selected = _selected(LAKE)
    assert {option.pid, class_path.pid} <= selected
    assert other_option.pid not in selected


def test_the_supervisor_marker_decides_over_the_arguments(spawn) -> None:
    # A program of the cluster stack that happens to name .lake, and one of ours that names no path at all.
    cluster_naming_lake = spawn(f"{LAKE}/conf/x", owner=CLUSTER)
    ours_without_path = spawn("--port", "9092", owner=LAKE)

    selected = _selected(LAKE)
    assert ours_without_path.pid in selected
    assert cluster_naming_lake.pid not in selected


def test_a_path_that_only_ends_in_the_state_dir_is_not_ours() -> None:
    assert not owned_by(LAKE, ["java", "/other/tmp/x/.lake/conf"], {})
    assert not owned_by(LAKE, ["java", "/tmp/x/.lakehouse"], {})
    assert owned_by(LAKE, ["minio", "server", "/tmp/x/.lake"], {})
    assert owned_by(LAKE, ["java", "/tmp/x/.lake/"], None)


def test_lake_commands_and_pytest_naming_the_state_dir_are_clients_not_stack_processes() -> None:
    assert not owned_by(LAKE, ["/venv/bin/python3.11", "/venv/bin/lake", "bench", "--manifest", f"{LAKE}/out"], {})
    assert not owned_by(LAKE, ["python", "-m", "pytest", f"--basetemp={LAKE}/tmp"], {})
    # With the marker, a `lake` command a stack program started is the stack's.
    assert owned_by(LAKE, ["/venv/bin/python3.11", "/venv/bin/lake", "job", "run"], {OWNER_ENV: str(LAKE)})
