"""Started by root, lake switches to the service user (spark_jobs.stack.service_user): the decision and the chown."""

from __future__ import annotations

import os
import pwd
import shutil
import tempfile
from pathlib import Path

import pytest

from spark_jobs.settings import Settings, load_settings
from spark_jobs.stack import service_user

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="creates an OS user and chowns: needs root")


def _settings(tmp_path: Path, **extra: str) -> Settings:
    return load_settings({"LAKE_STATE_DIR": str(tmp_path / "state"), "LAKE_CACHE_DIR": str(tmp_path / "cache"),
                          **extra})


def test_a_non_root_user_keeps_its_identity(tmp_path: Path) -> None:
    switch = service_user.plan(_settings(tmp_path), euid=1000)
    assert switch.user is None and switch.reason == "not started as root"


def test_root_as_the_service_user_means_keep_root(tmp_path: Path) -> None:
    switch = service_user.plan(_settings(tmp_path, LAKE_SERVICE_USER="root"), euid=0)
    assert switch.user is None and switch.reason == "LAKE_SERVICE_USER=root"


@root_only
def test_a_state_dir_the_user_cannot_reach_keeps_root_and_names_it() -> None:
    private = Path(tempfile.mkdtemp(prefix="lake-private-", dir="/var/tmp"))  # mkdtemp: 0700, root's
    try:
        settings = load_settings({"LAKE_STATE_DIR": str(private / "state"), "LAKE_CACHE_DIR": "/"})
        switch = service_user.plan(settings, euid=0)
        if switch.user is None and ("the checkout" in switch.reason or "venv" in switch.reason):
            pytest.skip(f"this checkout itself is unreachable for the service user: {switch.reason}")
        assert switch.user is None
        assert str(private) in switch.reason and "LAKE_STATE_DIR" in switch.reason
    finally:
        shutil.rmtree(private)


@root_only
def test_adopting_the_state_dir_gives_every_entry_to_the_user(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    entry = service_user.ensure_user(settings.service_user)
    (settings.state_dir / "secrets").mkdir(parents=True)
    (settings.state_dir / "secrets" / "x").write_text("s")
    (settings.state_dir / "data" / "kafka").mkdir(parents=True)
    switch = service_user.Switch(settings.service_user, entry.pw_uid, entry.pw_gid)
    assert service_user.adopt_state_dir(settings, switch) == 5  # the first time: the whole tree
    owners = {p.stat().st_uid for p in [settings.state_dir, *settings.state_dir.rglob("*")]}
    assert owners == {entry.pw_uid}
    # Later calls re-check what root may have written, but not data/ (only the services write there).
    (settings.state_dir / ".env").write_text("x")
    (settings.state_dir / "data" / "kafka" / "seg").write_text("x")
    assert service_user.adopt_state_dir(settings, switch) == 1
    assert (settings.state_dir / ".env").stat().st_uid == entry.pw_uid
    assert (settings.state_dir / "data" / "kafka" / "seg").stat().st_uid == 0
    assert pwd.getpwuid(entry.pw_uid).pw_shell == "/usr/sbin/nologin"


@root_only
def test_adopting_never_follows_a_link_or_a_hard_link_out_of_the_state_dir(tmp_path: Path) -> None:
    """The service user owns the state dir: a link it planted must not make root chown the link's target."""
    settings = _settings(tmp_path)
    entry = service_user.ensure_user(settings.service_user)
    outside = tmp_path / "roots"
    (outside / "sub").mkdir(parents=True)
    (outside / "secret").write_text("s")
    settings.state_dir.mkdir()
    (settings.state_dir / "home").symlink_to(outside)  # a link to a root folder
    (settings.state_dir / "file-link").symlink_to(outside / "secret")  # a link to a root file
    os.link(outside / "secret", settings.state_dir / "hard")  # a second name of a root file
    switch = service_user.Switch(settings.service_user, entry.pw_uid, entry.pw_gid)
    service_user.adopt_state_dir(settings, switch)
    assert {p.stat().st_uid for p in [outside, outside / "sub", outside / "secret"]} == {0}
    assert (settings.state_dir / "home").lstat().st_uid == entry.pw_uid  # the link itself is the user's
    assert settings.state_dir.stat().st_uid == entry.pw_uid


def test_root_reads_privilege_settings_from_the_environment_only(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / ".env").write_text("LAKE_SERVICE_USER=root\nLAKE_CACHE_DIR=/tmp/planted\n")
    env = {"LAKE_STATE_DIR": str(state)}
    assert load_settings(env).service_user == "root"  # the service user's own view: its .env applies
    trusted = load_settings(env, dotenv=False)
    assert trusted.service_user == "lake" and str(trusted.cache_dir) != "/tmp/planted"
