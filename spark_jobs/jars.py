"""Where the JVM artifacts resolved by ``make setup`` live, and which to use.

``infra/setup.sh`` copies the Maven artifacts listed in ``infra/jvm/*/pom.xml``
into ``<cache>/jars/<group>``. Spark gets the extra jars by path; a jar whose
artifact pyspark already ships is skipped, so pyspark's copy always wins (the
transitive closure from Maven carries older jackson/scala/hadoop copies).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from pathlib import Path

from spark_jobs.settings import REPO_ROOT, Settings

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


# Our Java sources (infra/): compiled together against pyspark's jars at `lake stack up`; the streaming app ships
# LakeDedup's classes as a jar.
INFRA = REPO_ROOT / "infra"
METASTORE_INIT = INFRA / "metastore" / "LakeMetastoreInit.java"
THRIFT_AUTH = INFRA / "thrift" / "LakeThriftAuth.java"
#: What an analyst login may not do on the Thrift and Spark Connect servers (docs/security.md, Security model).
GUARDS = tuple(INFRA / "guard" / f"{n}.java" for n in ("LakeAnalystGuard", "LakeLocalFileSystem", "LakeConnectGuard"))
#: The streaming app's own operator (first copy of an id within a horizon, on transformWithState's TTL state).
STREAM_SOURCES = (INFRA / "stream" / "LakeDedup.java",)
#: The Spark Connect server's main class (session artifact isolation off: infra/connect/LakeConnectServer.java).
CONNECT_SERVER = INFRA / "connect" / "LakeConnectServer.java"
#: Our Java helpers, compiled together against pyspark's jars at `lake stack up`.
JAVA_SOURCES = (METASTORE_INIT, THRIFT_AUTH, *GUARDS, CONNECT_SERVER, *STREAM_SOURCES)
#: The jar of :data:`STREAM_SOURCES`' classes in the classes folder (the stream ships it with spark.jars).
STREAM_JAR = "lake-stream.jar"


def java_bin() -> str:
    java = shutil.which("java")
    if java is None:
        home = os.environ.get("JAVA_HOME")
        if home and (Path(home) / "bin" / "java").exists():
            return str(Path(home) / "bin" / "java")
        raise FileNotFoundError("java not found on PATH (Java 17 is required); install a JDK 17 or set JAVA_HOME")
    return java


def java_classes_dir(settings: Settings) -> Path:
    """Where :data:`JAVA_SOURCES` are compiled to (per sources and pyspark version)."""
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in JAVA_SOURCES) + str(pyspark_home()).encode())
    # In the state dir, not the shared artifact cache: compiled by `lake stack up`, which may run as the
    # service user (spark_jobs.stack.service_user), who cannot write root's cache.
    return settings.state_dir / "java-classes" / f"lake-java-{digest.hexdigest()[:16]}"


def build_java_classes(settings: Settings) -> Path:
    """Compile the catalog schema init, the Thrift password check and the analyst guards against pyspark's jars
    once; returns their classes folder."""
    out = java_classes_dir(settings)
    if all((out / f"{src.stem}.class").is_file() for src in JAVA_SOURCES) and (out / STREAM_JAR).is_file():
        return out
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    compile_java(JAVA_SOURCES, tmp)
    try:
        tmp.rename(out)
    except OSError:  # compiled concurrently by another `lake stack up`
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def stream_jar(settings: Settings) -> Path:
    """The streaming app's jar (:data:`STREAM_SOURCES`), built by :func:`build_java_classes`."""
    return java_classes_dir(settings) / STREAM_JAR


def compile_java(sources: tuple[Path, ...], out: Path) -> Path:
    """Compile ``sources`` against pyspark's jars into the new folder ``out`` and package the classes of
    :data:`STREAM_SOURCES` among them as ``out/lake-stream.jar``; returns ``out``."""
    import zipfile

    javac = shutil.which("javac") or (str(Path(java_bin()).parent / "javac"))
    if not Path(javac).exists():
        raise FileNotFoundError("javac not found next to java or on PATH: the catalog init, the Thrift "
                                f"password check and the analyst guards ({', '.join(map(str, JAVA_SOURCES))}) are compiled at "
                                "`lake stack up`; install a JDK 17 (apt-get install openjdk-17-jdk-headless)")
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    proc = subprocess.run([javac, "-nowarn", "-d", str(out), "-cp", str(pyspark_home() / "jars" / "*"),
                           *map(str, sources)], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        shutil.rmtree(out, ignore_errors=True)
        raise RuntimeError(f"compiling {', '.join(map(str, sources))} failed (javac exit {proc.returncode}):\n"
                           f"{(proc.stdout + proc.stderr)[-3000:]}")
    stems = {src.stem for src in STREAM_SOURCES}
    with zipfile.ZipFile(out / STREAM_JAR, "w") as jar:
        for cls in sorted(out.glob("*.class")):
            if cls.name.split("$")[0].removesuffix(".class") in stems:
                jar.write(cls, cls.name)
    return out
