"""Started by root, ``lake`` runs as an unprivileged OS user (``LAKE_SERVICE_USER``, default ``lake``).

The switch happens once, at the start of the ``lake`` command, before anything is read or started: the CLI,
supervisord, every service it supervises (PostgreSQL included), the streaming app and the Spark drivers then
run as that user and own the state dir, so no file there is written by two users. Root is kept only when the
user cannot reach the checkout, its venv, the state dir or the artifact cache (a checkout under a 0700 home):
``lake`` then says so and why, and runs as before (PostgreSQL as ``LAKE_PG_OS_USER``).

Root trusts nothing the service user can write (docs/security.md, The state dir and the service user): the
settings that decide privilege (``LAKE_SERVICE_USER``, ``LAKE_CACHE_DIR``) come from root's environment and the
defaults, never from the state dir's ``.env``; the state dir is walked through directory descriptors without following a link
(:func:`os.fwalk`), so a link or a swapped folder cannot point root's chown elsewhere; a file with other hard
links is left alone; and root creates nothing in the state dir: the service user's ``home`` is made after the
switch, by the service user.
"""

from __future__ import annotations

import logging
import os
import pwd
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from spark_jobs.settings import REPO_ROOT, Settings
from spark_jobs.stack.errors import StackError, run_tool, system_tool

log = logging.getLogger(__name__)

#: Folders under the state dir whose files only the services write (never root): not re-walked on every call.
_SERVICE_ONLY = ("data",)


@dataclass(frozen=True)
class Switch:
    """What :func:`plan` decided: run as ``user`` (uid/gid), or stay root because of ``reason``."""

    user: str | None
    uid: int = -1
    gid: int = -1
    reason: str = ""


def ensure_user(name: str) -> pwd.struct_passwd:
    """The OS user ``name``, created as a system user without a login shell if missing."""
    try:
        return pwd.getpwnam(name)
    except KeyError:
        run_tool([system_tool("useradd"), "--system", "--user-group", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
                 f"creating system user {name} for the stack's processes")
        return pwd.getpwnam(name)


def _reachable(user: str, path: Path, mode: str) -> bool:
    """``test -<mode> path`` as ``user`` (the kernel's own permission check, ACLs included)."""
    proc = subprocess.run([system_tool("runuser"), "-u", user, "--", "test", f"-{mode}", str(path)], check=False,
                          capture_output=True)
    return proc.returncode == 0


def nearest_existing(path: Path) -> Path:
    """``path`` or its closest ancestor that exists (whose permissions decide whether it can be created)."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def plan(settings: Settings, euid: int | None = None) -> Switch:
    """Whether (and as whom) to drop root; never changes anything but creating the user."""
    if (os.geteuid() if euid is None else euid) != 0:
        return Switch(None, reason="not started as root")
    name = settings.service_user
    if name == "root":
        return Switch(None, reason="LAKE_SERVICE_USER=root")
    entry = ensure_user(name)
    venv = Path(sys.executable).parent
    needs = [(REPO_ROOT, "r", "the checkout"), (venv / "python", "x", "the venv's python"),
             (settings.cache_dir, "r", "the artifact cache (LAKE_CACHE_DIR)"),
             (nearest_existing(settings.state_dir.parent), "x", "the state dir's parent folder (LAKE_STATE_DIR)")]
    for path, mode, what in needs:
        if path.exists() and not _reachable(name, path, mode):
            return Switch(None, reason=f"OS user {name} cannot reach {what} at {path}; make it reachable (chmod o+x "
                                       "on its parent folders), or set LAKE_SERVICE_USER=root to keep root quietly")
    if _root_daemon(settings):
        return Switch(None, reason=(f"the stack running for {settings.state_dir} was started as root; "
                                    f"`lake stack down` then `lake stack up` moves it to OS user {name}"))
    return Switch(name, entry.pw_uid, entry.pw_gid)


def _root_daemon(settings: Settings) -> bool:
    """A supervisord of this state dir runs as root (started before the switch existed): only root can stop it.

    Found from the process table (a root process whose command line names this state dir's supervisord config),
    not from the pid file: that file is the service user's, and a forged pid must not keep ``lake`` root.
    """
    import psutil

    from spark_jobs.stack import supervisor

    conf = str(supervisor.conf_path(settings))
    for proc in psutil.process_iter(["uids", "cmdline"]):
        try:
            uids, cmdline = proc.info["uids"], proc.info["cmdline"] or []
        except (psutil.Error, KeyError):
            continue
        if uids is not None and uids.real == 0 and any("supervisord" in a for a in cmdline) and conf in cmdline:
            return True
    return False


def _chown_tree(root: Path, uid: int, gid: int, skip: tuple[str, ...] = ()) -> int:
    """Give everything under ``root`` to uid:gid; returns how many entries changed.

    Safe in a tree another user can write: :func:`os.fwalk` opens each folder relative to its parent's descriptor
    and skips one that was swapped for a link, every chown is relative to that descriptor with
    ``follow_symlinks=False``, and a non-folder with other hard links (which could be a root file linked in) is
    left alone.
    """
    changed = 0
    for _top, dirnames, filenames, dir_fd in os.fwalk(root, follow_symlinks=False):
        if _top == str(root):
            dirnames[:] = [d for d in dirnames if d not in skip]
        st = os.fstat(dir_fd)  # the folder actually opened, not whatever the path names now
        if st.st_uid != uid or st.st_gid != gid:
            os.fchown(dir_fd, uid, gid)
            changed += 1
        for name in [*dirnames, *filenames]:  # a folder is done when it is visited (above), a link here
            try:
                st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                if (st.st_uid == uid and st.st_gid == gid) or stat.S_ISDIR(st.st_mode):
                    continue
                if st.st_nlink > 1:
                    log.warning("  left %s/%s alone: it has %d hard links", _top, name, st.st_nlink)
                    continue
                os.chown(name, uid, gid, dir_fd=dir_fd, follow_symlinks=False)
                changed += 1
            except FileNotFoundError:  # a temp file of a running service
                continue
    return changed


def adopt_state_dir(settings: Settings, switch: Switch) -> int:
    """Make the state dir the service user's: the whole tree the first time (an installation from before, whose
    PostgreSQL files belonged to ``LAKE_PG_OS_USER``), then what root may have written since (not ``data/``)."""
    state = settings.state_dir
    state.mkdir(mode=0o700, parents=True, exist_ok=True)
    first = state.stat().st_uid != switch.uid
    return _chown_tree(state, switch.uid, switch.gid, skip=() if first else _SERVICE_ONLY)


def run_as_service_user(settings: Settings) -> Switch:
    """Called first thing by the ``lake`` command: become the service user (see the module docstring)."""
    switch = plan(settings)
    if switch.user is None:
        if os.geteuid() == 0 and switch.reason != "LAKE_SERVICE_USER=root":
            log.warning("lake: running as root: %s", switch.reason)
        return switch
    changed = adopt_state_dir(settings, switch)
    if changed:
        log.info("  gave %d file(s)/folder(s) under %s to OS user %s", changed, settings.state_dir, switch.user)
    home = settings.state_dir / "home"  # the user has no home; tools that write ~/.something write here
    # Fixed before the switch: defaults computed from HOME would move after it.
    # LAKE_SERVICE_USER and LAKE_CACHE_DIR as root decided them: the environment outranks the .env after the switch.
    os.environ.update({"HOME": str(home), "USER": switch.user, "LOGNAME": switch.user,
                       "LAKE_STATE_DIR": str(settings.state_dir), "LAKE_CACHE_DIR": str(settings.cache_dir),
                       "LAKE_SERVICE_USER": switch.user})
    try:
        os.setgroups([])
        os.setgid(switch.gid)
        os.setuid(switch.uid)
    except OSError as exc:
        raise StackError(f"could not switch to OS user {switch.user} ({exc}); set LAKE_SERVICE_USER=root to "
                         "run as root") from exc
    home.mkdir(mode=0o700, exist_ok=True)  # as the service user: whatever it put there, it gets nothing new
    return switch
