"""One driver per streaming query: a second ``lake stream run`` (or the supervised app started beside one)
is refused before it touches Spark, naming the driver that runs the query.

Each query's checkpoint and tables have one writer. Two drivers on one checkpoint would both run its
batches (Structured Streaming only refuses that inside one JVM), writing bronze and silver twice. The
guard is an exclusive ``flock`` per query on a file in the state dir: the kernel releases it when the
process dies, however it dies, so a SIGKILLed driver never leaves a stale claim behind and the
supervisor's restart gets it at once. It holds for every driver started from this state dir, which is
where ``lake stream`` runs its driver (Spark client mode), also when the executors are on a cluster.
"""

from __future__ import annotations

import fcntl
import json
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import psutil

from spark_jobs.settings import Settings

__all__ = ["QueryOwned", "claim", "lock_path"]


class QueryOwned(RuntimeError):
    """Another live process runs the query; the message names it and how to stop it."""


@dataclass
class Claim:
    """Held claims (open, locked files); released when the process exits or :meth:`release` is called."""

    files: list[IO[str]]

    def release(self) -> None:
        for f in self.files:
            f.close()
        self.files.clear()


def lock_path(settings: Settings, query: str) -> Path:
    return settings.run_dir / f"stream-{query}.owner"


def _describe(owner: dict[str, Any], query: str) -> str:
    who = (f"the supervised app (program '{owner['supervised']}', `lake stream status`)" if owner.get("supervised")
           else f"`{owner.get('cmdline', '?')}`")
    return (f"query {query} is already running in pid {owner.get('pid', '?')}, {who}, started "
            f"{owner.get('started_at', '?')}")


def claim(settings: Settings, queries: list[str]) -> Claim:
    """Claim every query in ``queries`` for this process, or raise :class:`QueryOwned` having claimed none."""
    settings.run_dir.mkdir(parents=True, exist_ok=True)
    held: list[IO[str]] = []
    for query in queries:
        path = lock_path(settings, query)
        f = open(path, "a+", encoding="utf-8")  # kept open (and locked) while the claim is held
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            try:
                owner = json.loads(f.read() or "{}")
            except json.JSONDecodeError:
                owner = {}
            f.close()
            Claim(held).release()
            raise QueryOwned(
                f"lake stream: refused: {_describe(owner, query)}. Two drivers on one checkpoint would write its "
                f"tables twice. Stop that one first (`lake stream stop` for the supervised app, Ctrl-C or "
                f"`kill {owner.get('pid', '<pid>')}` for a foreground run); the claim is {path}.") from None
        f.seek(0)
        f.truncate()
        f.write(json.dumps({"pid": os.getpid(), "query": query,
                            "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
                            "supervised": os.environ.get("SUPERVISOR_PROCESS_NAME"),
                            "cmdline": " ".join(psutil.Process().cmdline()).strip()}))
        f.flush()
        held.append(f)
    return Claim(held)
