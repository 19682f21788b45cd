from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest


def _delta_jars() -> str:
    """Delta's jars from the cache ``make setup`` fills (the unit tests' Spark reads and writes local Delta tables).

    The cache is where the product's settings put it (``settings.cache_dir``: ``LAKE_CACHE_DIR``, else
    ``/var/cache/lakestream`` for root), never a second copy of that rule here.
    """
    from spark_jobs.settings import load_settings

    cache = load_settings().cache_dir / "jars" / "spark"
    jars = sorted(str(p) for p in cache.glob("delta-*.jar"))
    if not any("delta-spark" in j for j in jars) or not any("delta-storage" in j for j in jars):
        pytest.exit(f"Delta jars (delta-spark, delta-storage) missing from {cache}: run `make setup`", returncode=2)
    return ",".join(jars)


def _stream_jar() -> str:
    """The streaming app's operators (``infra/stream``, :func:`spark_jobs.jars.compile_java`), compiled once
    per source version into the temp dir (the events plans de-duplicate with ``LakeDedup``)."""
    import hashlib
    import tempfile
    from pathlib import Path

    from spark_jobs.jars import STREAM_JAR, STREAM_SOURCES, compile_java

    digest = hashlib.sha256(b"".join(p.read_bytes() for p in STREAM_SOURCES)).hexdigest()[:16]
    out = Path(tempfile.gettempdir()) / f"lakestream-test-java-{digest}"
    if not (out / STREAM_JAR).is_file():
        tmp = out.with_name(f"{out.name}.tmp{os.getpid()}")
        compile_java(STREAM_SOURCES, tmp)
        try:
            tmp.rename(out)
        except OSError:  # compiled concurrently
            pass
    return str(out / STREAM_JAR)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local Spark with Delta for unit tests (no catalog, no lake: local paths only)."""
    from pyspark.sql import SparkSession

    from spark_jobs.session import CODEGEN_CONF, DELTA_CONF

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # Python workers (mapInArrow) need the venv's packages

    conf: dict[str, Any] = {**DELTA_CONF, **CODEGEN_CONF}  # pyspark's stub wants dict[str, OptionalPrimitive]
    session = (
        SparkSession.builder.master("local[2]")
        .appName("lakestream-unit")
        .config("spark.jars", f"{_delta_jars()},{_stream_jar()}")
        .config(map=conf)
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture
def keep_umask_and_logging() -> Iterator[None]:
    """Restore the process umask and the root logger's handlers and level after a test that runs ``lake``
    in-process (``cli.main`` sets umask 077 and lake's console logging for the process)."""
    import logging
    import os

    old = os.umask(0o077)
    os.umask(old)
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    os.umask(old)
    root.handlers[:], root.level = handlers, level
