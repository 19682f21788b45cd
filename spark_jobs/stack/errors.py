"""The stack's one error type, and running its command-line tools (initdb, kafka-storage, airflow)."""

from __future__ import annotations

import os
import shutil
import subprocess


class StackError(RuntimeError):
    """Something about the stack a person has to act on; the message says what."""


def system_tool(name: str) -> str:
    """A system administration tool (runuser, useradd) by full path: ``/usr/sbin`` is often not on a PATH."""
    found = shutil.which(name, path=f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin:/usr/bin:/bin")
    if found is None:
        raise StackError(f"{name} not found (looked on PATH and in /usr/sbin, /sbin); install util-linux/passwd")
    return found


def run_tool(cmd: list[str], what: str, env: dict[str, str] | None = None, user: str | None = None) -> str:
    """Run ``cmd`` (as ``user`` through runuser when given); its stdout, or a StackError with its output."""
    if user:
        cmd = [system_tool("runuser"), "-u", user, "--", *cmd]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        out = (proc.stdout + proc.stderr).strip()[-3000:]
        raise StackError(f"{what} failed (exit {proc.returncode}): {' '.join(cmd[:6])} ...\n{out}")
    return proc.stdout
