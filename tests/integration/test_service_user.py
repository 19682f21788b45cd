"""Started by root, the whole stack runs as the unprivileged service user (spark_jobs.stack.service_user)."""

from __future__ import annotations

import os
import pwd
from pathlib import Path

import psutil
import pytest

from spark_jobs.settings import Settings
from spark_jobs.stack import service_user, supervisor
from tests.integration.lakehelpers import run_lake


def _switch(settings: Settings) -> service_user.Switch:
    if os.geteuid() != 0:
        pytest.skip("the tests run as a normal user: the stack runs as that user, nothing to switch")
    switch = service_user.plan(settings)
    if switch.user is None:
        pytest.skip(f"this machine keeps root for the stack ({switch.reason}); lake printed why at start")
    return switch


def test_supervisord_and_every_program_run_as_the_service_user(stack: Settings) -> None:
    switch = _switch(stack)
    pid = supervisor.daemon_pid(stack)
    assert pid is not None
    daemon = psutil.Process(pid)
    tree = [daemon, *daemon.children(recursive=True)]
    assert len(tree) > 10  # supervisord, PostgreSQL's processes, the JVMs, Airflow's
    wrong = [f"{p.pid} {p.username()} {' '.join(p.cmdline())[:100]}" for p in tree
             if p.uids().real != switch.uid or p.uids().effective != switch.uid]
    assert wrong == []


def test_the_state_dir_belongs_to_the_service_user(stack: Settings) -> None:
    switch = _switch(stack)
    run_lake("stack", "status")  # a root invocation after the stack started must not leave root's files behind
    foreign = [str(p) for p in [stack.state_dir, *stack.state_dir.rglob("*")]
               if _owner(p) not in (switch.uid, None)]
    assert foreign == []
    assert pwd.getpwuid(switch.uid).pw_name == stack.service_user


def _owner(path: Path) -> int | None:
    try:
        return path.lstat().st_uid
    except FileNotFoundError:  # a temp file of a running service
        return None
