"""Replacing a file atomically: the one helper for files that others read while we rewrite them (private
configs and secrets, the streaming queries' status files, the Data Docs trend page)."""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path
from typing import Any


def write_atomic(path: Path, text: str, private: bool = False) -> None:
    """Replace ``path`` with ``text`` (UTF-8): a reader sees the old file or the new one, never a part of it.

    Written to a new hidden file beside ``path`` (same folder, so same file system) and renamed over it; that file
    is removed if the write fails. ``private``: mode 0600, else the mode a new file gets (0666 less the umask).
    The folder must exist. No fsync: atomic for readers and against the writer dying, not against power loss.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    while True:
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
        try:
            fd = os.open(tmp, flags, 0o600 if private else 0o666)
            break
        except FileExistsError:  # another writer's temporary file: draw another name
            continue
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_json_atomic(path: Path, doc: dict[str, Any]) -> None:
    """``doc`` as indented JSON, written atomically (:func:`write_atomic`)."""
    write_atomic(path, json.dumps(doc, indent=1, sort_keys=True))


def read_json(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path``; None when it is missing, unreadable or not an object."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None
