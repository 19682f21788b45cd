"""Where the JVM artifacts resolved by ``make setup`` live, and which to use.

``infra/setup.sh`` copies the Maven artifacts listed in ``infra/jvm/*/pom.xml``
into ``<cache>/jars/<group>``. Spark gets the extra jars by path; a jar whose
artifact pyspark already ships is skipped, so pyspark's copy always wins (the
transitive closure from Maven carries older jackson/scala/hadoop copies).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from spark_jobs.settings import Settings

_JAR = re.compile(r"^(?P<name>.*)-\d+(?:\.\d+)+[\w.\-]*\.jar$")


class MissingArtifactError(RuntimeError):
    """A JVM artifact or binary that ``make setup`` should have produced is absent."""


def artifact_name(jar: str) -> str:
    """``jackson-core-2.13.5.jar`` -> ``jackson-core``."""
    match = _JAR.match(jar)
    return match.group("name") if match else jar.removesuffix(".jar")


def pyspark_home() -> Path:
    """The Spark installation pyspark ships (``bin/``, ``jars/``).

    A Python job under ``spark-submit`` imports pyspark from ``<SPARK_HOME>/python/lib/pyspark.zip``, whose
    folder has no ``jars/``: the installation is then ``SPARK_HOME``. Without it, every cached jar looked
    "not provided by Spark", and a job's session rewrote spark-defaults.conf with old jackson/scala/slf4j copies
    ahead of Spark's own, breaking the next JVM (``NoClassDefFoundError: ... SparkThrowableHelper$``).
    """
    import pyspark

    home = Path(pyspark.__file__).resolve().parent
    if (home / "jars").is_dir():
        return home
    candidates = [Path(os.environ["SPARK_HOME"])] if os.environ.get("SPARK_HOME") else []
    candidates += [p for p in home.parents if p.name == "pyspark"]
    for candidate in candidates:
        if (candidate / "jars").is_dir():
            return candidate
    raise MissingArtifactError(f"Spark's jars/ folder is neither next to pyspark ({home}) nor in SPARK_HOME "
                               f"({os.environ.get('SPARK_HOME', 'unset')}); reinstall with `make setup`")


def jar_group_dir(settings: Settings, group: str) -> Path:
    path = settings.cache_dir / "jars" / group
    if not path.is_dir() or not any(path.iterdir()):
        raise MissingArtifactError(
            f"JVM artifacts '{group}' not found in {path}; run `make setup` (it resolves infra/jvm/{group}/pom.xml)"
        )
    return path


def select_extra_jars(candidates: list[str], provided: set[str]) -> list[str]:
    """Keep the candidate jar names whose artifact is not already provided."""
    return sorted(j for j in candidates if j.endswith(".jar") and artifact_name(j) not in provided)


def spark_extra_jars(settings: Settings) -> list[Path]:
    """Delta, Kafka source, S3A and JDBC jars to add to every Spark process."""
    provided = {artifact_name(p.name) for p in (pyspark_home() / "jars").glob("*.jar")}
    group = jar_group_dir(settings, "spark")
    names = select_extra_jars([p.name for p in group.iterdir()], provided)
    return [group / n for n in names]
