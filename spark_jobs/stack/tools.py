"""Where the stack's programs and artifacts are (PostgreSQL, MinIO, the venv; java and our compiled Java helpers
in :mod:`spark_jobs.jars`), checked before anything starts so a missing piece is named up front."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from spark_jobs.jars import build_java_classes, jar_group_dir, java_bin
from spark_jobs.settings import Settings

MINIO_BIN_NAME = "minio"




def minio_binary(settings: Settings) -> Path:
    path = settings.cache_dir / "bin" / MINIO_BIN_NAME
    if not path.exists():
        raise FileNotFoundError(f"MinIO binary missing at {path}; run `make setup` (it builds MinIO from its Go module)")
    return path


def pg_bin(name: str) -> str:
    """A PostgreSQL server binary: PATH first, then Debian's versioned folder."""
    found = shutil.which(name)
    if found:
        return found
    for candidate in sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"), reverse=True):
        return str(candidate)
    raise FileNotFoundError(
        f"PostgreSQL binary '{name}' not found on PATH or in /usr/lib/postgresql/*/bin; "
        "install PostgreSQL 15 server binaries (apt-get install postgresql-15) or run `make setup`"
    )


def venv_bin() -> Path:
    return Path(sys.executable).parent


def classpath(*parts: Path | str) -> str:
    return ":".join(str(p) for p in parts)


def check_artifacts(settings: Settings) -> None:
    """Fail early, naming the missing piece, before anything starts."""
    jar_group_dir(settings, "kafka")
    jar_group_dir(settings, "debezium")
    jar_group_dir(settings, "spark")
    minio_binary(settings)
    java_bin()
    build_java_classes(settings)
