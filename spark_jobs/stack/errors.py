"""The stack's one error type, and running its command-line tools (initdb, kafka-storage, airflow)."""

from __future__ import annotations

import subprocess


class StackError(RuntimeError):
    """Something about the stack a person has to act on; the message says what."""


def run_tool(cmd: list[str], what: str, env: dict[str, str] | None = None, user: str | None = None) -> str:
    """Run ``cmd`` (as ``user`` through runuser when given); its stdout, or a StackError with its output."""
    if user:
        cmd = ["runuser", "-u", user, "--", *cmd]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        out = (proc.stdout + proc.stderr).strip()[-3000:]
        raise StackError(f"{what} failed (exit {proc.returncode}): {' '.join(cmd[:6])} ...\n{out}")
    return proc.stdout
