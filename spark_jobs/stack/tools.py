"""Where the stack's programs and artifacts are (java, PostgreSQL, MinIO, the venv, our compiled Java helpers),
checked before anything starts so a missing piece is named up front."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

from spark_jobs.jars import jar_group_dir, pyspark_home
from spark_jobs.settings import REPO_ROOT, Settings

INFRA = REPO_ROOT / "infra"
METASTORE_INIT = INFRA / "metastore" / "LakeMetastoreInit.java"
THRIFT_AUTH = INFRA / "thrift" / "LakeThriftAuth.java"
#: What an analyst login may not do on the Thrift and Spark Connect servers (README, Security model).
GUARDS = tuple(INFRA / "guard" / f"{n}.java" for n in ("LakeAnalystGuard", "LakeLocalFileSystem", "LakeConnectGuard"))
#: The streaming app's own operator (first copy of an id within a horizon, on transformWithState's TTL state).
STREAM_SOURCES = (INFRA / "stream" / "LakeDedup.java",)
#: Our Java helpers, compiled together against pyspark's jars at `lake stack up`.
JAVA_SOURCES = (METASTORE_INIT, THRIFT_AUTH, *GUARDS, *STREAM_SOURCES)
#: The jar of :data:`STREAM_SOURCES`' classes in the classes folder (the stream ships it with spark.jars).
STREAM_JAR = "lake-stream.jar"
MINIO_BIN_NAME = "minio"




def java_bin() -> str:
    java = shutil.which("java")
    if java is None:
        home = os.environ.get("JAVA_HOME")
        if home and (Path(home) / "bin" / "java").exists():
            return str(Path(home) / "bin" / "java")
        raise FileNotFoundError("java not found on PATH (Java 17 is required); install a JDK 17 or set JAVA_HOME")
    return java


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
