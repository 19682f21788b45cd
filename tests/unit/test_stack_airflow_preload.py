"""The scheduler preloads the task modules before its LocalExecutor forks; other Airflow processes do not."""

from __future__ import annotations

import json
import subprocess
import sys

from spark_jobs.settings import REPO_ROOT
from spark_jobs.stack.airflow_preload import MODULES, is_scheduler, preload

_PROBE = """
import sys
sys.argv = ["airflow", {command!r}]
import airflow_local_settings
import json
print(json.dumps(sorted(m for m in {modules!r} if m in sys.modules)))
"""


def _loaded_after_local_settings(command: str) -> list[str]:
    env_path = f"{REPO_ROOT}:{REPO_ROOT / 'infra' / 'airflow'}"
    proc = subprocess.run([sys.executable, "-c", _PROBE.format(command=command, modules=MODULES)],
                          env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin"}, capture_output=True, text=True,
                          timeout=300, check=True)
    loaded: list[str] = json.loads(proc.stdout.strip().splitlines()[-1])
    return loaded


def test_only_the_scheduler_preloads() -> None:
    assert is_scheduler(["airflow", "scheduler"])
    assert not is_scheduler(["airflow", "api-server"]) and not is_scheduler(["airflow"])
    assert _loaded_after_local_settings("scheduler") == sorted(MODULES)
    assert _loaded_after_local_settings("dag-processor") == []


def test_a_module_that_cannot_be_imported_is_reported_not_raised() -> None:
    assert preload(("json", "spark_jobs.no_such_module")) == ["spark_jobs.no_such_module"]
