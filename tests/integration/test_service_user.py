"""Started by root, the whole stack runs as the unprivileged service user (spark_jobs.stack.service_user)."""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import tempfile
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


def _as_service_user(user: str, script: str) -> None:
    """Run ``script`` with sh as the service user (an attacker who owns the state dir)."""
    subprocess.run(["runuser", "-u", user, "--", "sh", "-ec", script], check=True, capture_output=True, text=True)


def test_a_link_planted_in_the_state_dir_does_not_make_root_chown_its_target(stack: Settings) -> None:
    switch = _switch(stack)
    target = Path(tempfile.mkdtemp(prefix="lake-root-owned-", dir="/var/tmp"))  # root's, 0700
    home = stack.state_dir / "home"
    saved = stack.state_dir / "home.saved-by-test"
    try:
        _as_service_user(stack.service_user, f'mv "{home}" "{saved}"; ln -s "{target}" "{home}"')
        assert home.is_symlink()
        run_lake("settings")  # root: the switch, then the command as the service user
        st = target.stat()
        assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, 0, 0o700)
        assert home.is_symlink() and home.lstat().st_uid == switch.uid  # root did not touch or replace it either
    finally:
        _as_service_user(stack.service_user, f'rm -f "{home}"; mv "{saved}" "{home}"')
        shutil.rmtree(target)


def test_root_takes_no_privilege_setting_from_the_service_users_env_file(stack: Settings) -> None:
    switch = _switch(stack)
    env_file = stack.state_dir / ".env"
    original = env_file.read_bytes()
    planted = Path(tempfile.mkdtemp(prefix="lake-planted-cache-", dir="/var/tmp"))
    os.chown(planted, switch.uid, switch.gid)  # a cache the service user controls: binaries root would run
    try:
        _as_service_user(stack.service_user,
                         f'printf "LAKE_SERVICE_USER=root\\nLAKE_CACHE_DIR={planted}\\n" >> "{env_file}"')
        out = run_lake("settings").stdout
        settings = dict(line.split(" = ", 1) for line in out.splitlines() if " = " in line)
        assert settings["service_user"] == stack.service_user  # still switched: .env's "root" was not taken
        assert settings["cache_dir"] == str(stack.cache_dir)
        assert not any(planted.iterdir())
    finally:
        env_file.write_bytes(original)  # an existing file keeps its owner
        shutil.rmtree(planted)
