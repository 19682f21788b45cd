"""SHA-256 of every JVM artifact ``make setup`` puts in ``<cache>/jars``, pinned in ``infra/jvm/checksums.sha256``.

The file is ``sha256sum``'s format, one line per file, paths relative to ``<cache>/jars``
(``<hex>  kafka/kafka-clients-4.3.0.jar``), grouped by the first path component (``kafka``, ``debezium``,
``spark``: one per ``infra/jvm/<group>/pom.xml``). Setup verifies each group after Maven resolved it and on every
later run: a changed, missing or extra file fails setup, naming it. ``make jar-checksums`` rewrites the file from
the cache after a version bump (``python -m spark_jobs.cli.jar_checksums write``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from spark_jobs.settings import REPO_ROOT

CHECKSUMS = REPO_ROOT / "infra" / "jvm" / "checksums.sha256"
#: Setup's own bookkeeping in a group's folder, not an artifact.
_IGNORED = {".lake-stamp"}


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def artifacts(jars_dir: Path, group: str) -> list[str]:
    """Every file under ``<jars_dir>/<group>`` (links not followed), as ``<group>/<relative path>``, sorted."""
    root = jars_dir / group
    return sorted(p.relative_to(jars_dir).as_posix() for p in root.rglob("*")
                  if (p.is_file() or p.is_symlink()) and p.name not in _IGNORED)


def read(path: Path = CHECKSUMS) -> dict[str, str]:
    """``{relative path: hex digest}`` from a ``sha256sum``-format file (``#`` comments and blank lines skipped)."""
    out: dict[str, str] = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        digest, sep, name = line.partition("  ")
        if not sep or len(digest) != 64 or not name:
            raise ValueError(f"{path}:{number}: not '<sha256>  <group>/<file>': {line!r}")
        out[name] = digest
    return out


def render(entries: dict[str, str]) -> str:
    header = ("# SHA-256 of every file setup puts in <cache>/jars (infra/jvm/*/pom.xml, from Maven Central).\n"
              "# Verified by infra/setup.sh; regenerate after a version bump: make jar-checksums (docs/operations.md, Setup).\n")
    return header + "".join(f"{entries[name]}  {name}\n" for name in sorted(entries))


@dataclass
class Mismatch:
    """What differs between a group's files in the cache and the pinned checksums."""

    changed: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.changed or self.missing or self.extra)

    def lines(self) -> list[str]:
        return ([f"checksum differs: {n}" for n in self.changed] + [f"missing (pinned, not resolved): {n}" for n in self.missing]
                + [f"extra (resolved, not pinned): {n}" for n in self.extra])


def verify(jars_dir: Path, group: str, pinned: dict[str, str]) -> Mismatch:
    """Compare ``<jars_dir>/<group>`` with the ``pinned`` entries of that group."""
    want = {n: d for n, d in pinned.items() if n.split("/", 1)[0] == group}
    have = artifacts(jars_dir, group)
    result = Mismatch(missing=sorted(set(want) - set(have)), extra=sorted(set(have) - set(want)))
    result.changed = [n for n in have if n in want and sha256(jars_dir / n) != want[n]]
    return result


def compute(jars_dir: Path, groups: Iterable[str]) -> dict[str, str]:
    """``{relative path: hex digest}`` of every artifact of ``groups`` in the cache."""
    return {name: sha256(jars_dir / name) for group in groups for name in artifacts(jars_dir, group)}
