"""The stack's services: how each is launched, configured and probed.

Configs in ``infra/conf`` are templates with ``@@NAME@@`` placeholders; they are
rendered into ``<state>/conf`` on every ``lake stack up`` so a changed setting
(a port, a heap) takes effect on the next start. The same templates serve a
container image or a cluster: only the substituted values differ.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from spark_jobs import kafka_auth
from spark_jobs.jars import jar_group_dir, pyspark_home, spark_extra_jars
from spark_jobs.session import spark_conf_dir, spark_defaults_text, write_private
from spark_jobs.settings import REPO_ROOT, Settings
from spark_jobs.stack import health

INFRA = REPO_ROOT / "infra"
TEMPLATES = INFRA / "conf"
METASTORE_LAUNCHER = INFRA / "metastore" / "LakeMetaStore.java"
THRIFT_AUTH = INFRA / "thrift" / "LakeThriftAuth.java"
#: Our Java helpers, compiled together against pyspark's jars at `lake stack up`.
JAVA_SOURCES = (METASTORE_LAUNCHER, THRIFT_AUTH)
MINIO_BIN_NAME = "minio"


@dataclass(frozen=True)
class Program:
    """One supervised process."""

    name: str
    command: list[str]
    env: dict[str, str] = field(default_factory=dict)
    user: str | None = None
    stop_signal: str = "TERM"
    stop_wait: int = 30
    #: Send the stop signal to the whole process group (True) or to the program's own process only (False).
    #: Either way, whatever is left after ``stop_wait`` seconds is killed as a group.
    stop_as_group: bool = True
    #: supervisord ``startsecs``: how long the program must stay up after a spawn to count as started. A
    #: program that exits sooner goes to BACKOFF and is retried (1 s, 2 s, ... apart) ``start_retries`` times,
    #: then FATAL: a crash loop stops. A program that dies after it counted as started is restarted at once
    #: (a kill of a healthy worker) and gets its retries afresh. So set it above the program's usual time to
    #: crash when misconfigured (a JVM's startup, a first connection).
    start_secs: int = 5
    start_retries: int = 3


@dataclass(frozen=True)
class Service:
    """A user-visible service: one or more programs, a port and a probe."""

    name: str
    programs: tuple[Program, ...]
    ports: tuple[int, ...]
    endpoint: str
    probe: Callable[[Settings], health.Probe]
    start_timeout: float
    hint: str
    #: What ``lake stack status`` runs instead of ``probe`` (a deeper check that ``lake stack up`` must not
    #: wait on, e.g. Connect's connectors and tasks).
    status_probe: Callable[[Settings], health.Probe] | None = None

    @property
    def main(self) -> str:
        return self.programs[0].name


def render_template(text: str, values: dict[str, str]) -> str:
    for key, value in values.items():
        text = text.replace(f"@@{key}@@", value)
    if "@@" in text:
        start = text.index("@@")
        raise ValueError(f"unsubstituted placeholder near {text[start:start + 40]!r}")
    return text


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


def pg_dirs(settings: Settings) -> tuple[Path, Path]:
    """PostgreSQL's data and socket folders.

    Normally inside the state dir. When we are root, PostgreSQL runs as an
    unprivileged OS user (it refuses root); if that user cannot traverse the
    path to the state dir (a checkout under a 0700 folder), the cluster lives in
    ``/var/lib/lakestream/postgres/<hash of the state dir>`` instead, and we say so.
    """
    default = (settings.data_dir / "postgres", settings.run_dir / "postgres")
    if os.geteuid() != 0 or _traversable(settings.state_dir, settings.pg_os_user):
        return default
    digest = hashlib.sha256(str(settings.state_dir).encode()).hexdigest()[:12]
    base = Path("/var/lib/lakestream/postgres") / digest
    return base / "data", base / "run"


@functools.cache
def _traversable(path: Path, user: str) -> bool:
    import pwd

    try:
        pw = pwd.getpwnam(user)
    except KeyError:
        return True  # created later with default permissions; checked again at initdb
    for parent in [path, *path.parents]:
        if not parent.exists():
            continue
        st = parent.stat()
        if st.st_uid == pw.pw_uid:
            ok = bool(st.st_mode & 0o100)
        elif st.st_gid == pw.pw_gid:
            ok = bool(st.st_mode & 0o010)
        else:
            ok = bool(st.st_mode & 0o001)
        if not ok:
            return False
    return True


def venv_bin() -> Path:
    return Path(sys.executable).parent


def base_env(settings: Settings) -> dict[str, str]:
    """Environment every supervised program gets (PATH with our venv first)."""
    path = f"{venv_bin()}:{os.environ.get('PATH', '/usr/local/bin:/usr/bin:/bin')}"
    env = {
        "PATH": path,
        "HOME": os.environ.get("HOME", "/root"),
        "LAKE_STATE_DIR": str(settings.state_dir),
        "LAKE_CACHE_DIR": str(settings.cache_dir),
        "SPARK_CONF_DIR": str(spark_conf_dir(settings)),
        "PYSPARK_PYTHON": sys.executable,
        "PYTHONPATH": str(REPO_ROOT),
        "SPARK_LOCAL_IP": settings.host,
    }
    if "JAVA_HOME" in os.environ:
        env["JAVA_HOME"] = os.environ["JAVA_HOME"]
    return env


def airflow_env(settings: Settings) -> dict[str, str]:
    """Airflow 3 configuration as ``AIRFLOW__*`` variables (no airflow.cfg edits)."""
    home = settings.state_dir / "airflow"
    db = (f"postgresql+psycopg2://{settings.pg_airflow_user}:{settings.pg_airflow_password}"
          f"@{settings.pg_host}:{settings.pg_port}/{settings.airflow_db}")
    spark_conn = '{"conn_type": "spark", "host": "' + settings.spark_master + '"}'
    return {
        "AIRFLOW_HOME": str(home),
        # infra/airflow holds airflow_local_settings.py: the scheduler preloads the task modules before forking.
        "PYTHONPATH": f"{REPO_ROOT}{os.pathsep}{REPO_ROOT / 'infra' / 'airflow'}",
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO_ROOT / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__PARALLELISM": str(settings.airflow_parallelism),
        "AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG": str(settings.airflow_parallelism),
        "AIRFLOW__CORE__DEFAULT_TIMEZONE": "utc",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{settings.airflow_url}/execution/",
        "AIRFLOW__CORE__AUTH_MANAGER": "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{settings.airflow_admin_user}:admin",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / "passwords.json"),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": db,
        "AIRFLOW__API__HOST": settings.host,
        "AIRFLOW__API__PORT": str(settings.airflow_port),
        "AIRFLOW__API__BASE_URL": settings.airflow_url,
        "AIRFLOW__API__SECRET_KEY": settings.airflow_secret_key,
        "AIRFLOW__API_AUTH__JWT_SECRET": settings.airflow_secret_key,
        "AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK": "True",
        # On LAKE_HOST and a port from the settings (Airflow's default is every interface, port 8974).
        "AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_SERVER_HOST": settings.host,
        "AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_SERVER_PORT": str(settings.airflow_scheduler_health_port),
        "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(settings.log_dir / "airflow-tasks"),
        # Task logs are the owner's alone (Airflow chmods them to 0o775/0o664 by default, whatever the umask).
        "AIRFLOW__LOGGING__FILE_TASK_HANDLER_NEW_FOLDER_PERMISSIONS": "0o700",
        "AIRFLOW__LOGGING__FILE_TASK_HANDLER_NEW_FILE_PERMISSIONS": "0o600",
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "30",
        "AIRFLOW_CONN_LAKE_SPARK": spark_conn,
    }


def driver_ports_conf(driver_port: int, block_manager_port: int) -> dict[str, str]:
    """Spark properties that put a long-running driver's RPC and block manager on ports from the settings.

    No retries on the next port up: a taken port is an error naming it, not a listener somewhere else.
    The driver's own block manager only (``spark.driver.blockManager.port``): ``spark.blockManager.port`` would
    also pin every executor of a cluster to that port, and on one machine they then fail to bind.
    """
    return {"spark.driver.port": str(driver_port), "spark.driver.blockManager.port": str(block_manager_port),
            "spark.port.maxRetries": "0"}


def stream_ports_conf(settings: Settings, environ: Mapping[str, str]) -> dict[str, str]:
    """Fixed driver ports for the streaming app supervised as ``stream`` (supervisord names its children in
    ``SUPERVISOR_PROCESS_NAME``); none for another driver, which would collide with it."""
    if environ.get("SUPERVISOR_PROCESS_NAME") != stream_program(settings).name:
        return {}
    return driver_ports_conf(settings.stream_driver_port, settings.stream_block_manager_port)


def driver_port_args(driver_port: int, block_manager_port: int) -> list[str]:
    return [w for k, v in driver_ports_conf(driver_port, block_manager_port).items() for w in ("--conf", f"{k}={v}")]


def java_classes_dir(settings: Settings) -> Path:
    """Where :data:`JAVA_SOURCES` are compiled to (per sources and pyspark version)."""
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in JAVA_SOURCES) + str(pyspark_home()).encode())
    return settings.cache_dir / "classes" / f"lake-java-{digest.hexdigest()[:16]}"


def build_java_classes(settings: Settings) -> Path:
    """Compile the metastore launcher and the Thrift password check against pyspark's jars once; returns
    their classes folder."""
    out = java_classes_dir(settings)
    if all((out / f"{src.stem}.class").is_file() for src in JAVA_SOURCES):
        return out
    javac = shutil.which("javac") or (str(Path(java_bin()).parent / "javac"))
    if not Path(javac).exists():
        raise FileNotFoundError("javac not found next to java or on PATH: the metastore launcher and the Thrift "
                                f"password check ({', '.join(map(str, JAVA_SOURCES))}) are compiled at "
                                "`lake stack up`; install a JDK 17 (apt-get install openjdk-17-jdk-headless)")
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    proc = subprocess.run([javac, "-nowarn", "-d", str(tmp), "-cp", str(pyspark_home() / "jars" / "*"),
                           *map(str, JAVA_SOURCES)], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise RuntimeError(f"compiling {', '.join(map(str, JAVA_SOURCES))} failed (javac exit {proc.returncode}):\n"
                           f"{(proc.stdout + proc.stderr)[-3000:]}")
    try:
        tmp.rename(out)
    except OSError:  # compiled concurrently by another `lake stack up`
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def _cp(*parts: Path | str) -> str:
    return ":".join(str(p) for p in parts)


def services(settings: Settings) -> list[Service]:
    """All services in start order."""
    env = base_env(settings)
    conf = settings.conf_dir
    data = settings.data_dir
    host = settings.host
    log4j = f"-Dlog4j2.configurationFile={conf / 'log4j2' / 'kafka.yaml'}"
    pg_user = settings.pg_os_user if os.geteuid() == 0 else None
    pg_data, pg_sock = pg_dirs(settings)

    postgres = Service(
        name="postgres",
        programs=(Program(
            name="postgres",
            command=[pg_bin("postgres"), "-D", str(pg_data), "-p", str(settings.pg_port),
                     "-c", f"listen_addresses={host}",
                     "-c", f"unix_socket_directories={pg_sock}",
                     # The socket is PostgreSQL's OS user's alone (default 0777); the stack connects over TCP.
                     "-c", "unix_socket_permissions=0700",
                     "-c", "wal_level=logical", "-c", "max_wal_senders=10", "-c", "max_replication_slots=10",
                     # An abandoned replication slot must not fill the disk.
                     "-c", "max_slot_wal_keep_size=4GB",
                     "-c", "shared_buffers=256MB", "-c", "max_connections=200",
                     "-c", "logging_collector=off", "-c", "log_min_messages=warning"],
            env={"PATH": env["PATH"]},
            user=pg_user,
            stop_signal="INT",  # fast shutdown; TERM waits for every client
            start_secs=10,
        ),),
        ports=(settings.pg_port,),
        endpoint=f"postgresql://{settings.pg_host}:{settings.pg_port}",
        probe=health.postgres,
        start_timeout=60,
        hint="PostgreSQL 15 binaries (initdb, postgres) must be on PATH",
    )
    minio = Service(
        name="minio",
        programs=(Program(
            name="minio",
            command=[str(settings.cache_dir / "bin" / MINIO_BIN_NAME), "server", str(data / "minio"),
                     "--address", f"{host}:{settings.minio_port}",
                     "--console-address", f"{host}:{settings.minio_console_port}", "--quiet"],
            env={**env, "MINIO_ROOT_USER": settings.minio_root_user,
                 "MINIO_ROOT_PASSWORD": settings.minio_root_password,
                 "MINIO_BROWSER_REDIRECT": "off", "MINIO_UPDATE": "off"},
            start_secs=10,
        ),),
        ports=(settings.minio_port, settings.minio_console_port),
        endpoint=settings.s3_endpoint,
        probe=health.minio,
        start_timeout=60,
        hint="the MinIO binary is built by `make setup`",
    )
    kafka_cp = str(settings.cache_dir / "jars" / "kafka" / "*")
    kafka = Service(
        name="kafka",
        programs=(Program(
            name="kafka",
            command=[java_bin(), f"-Xmx{settings.kafka_heap}", f"-Xms{settings.kafka_heap}", "-XX:+UseG1GC",
                     "-Djava.awt.headless=true", log4j, "-cp", kafka_cp, "kafka.Kafka",
                     str(conf / "kafka" / "server.properties")],
            env=env,
            start_secs=30,  # a broker that cannot bind or read its log dirs dies within ~10 s on 2 cores
        ),),
        ports=(settings.kafka_port, settings.kafka_controller_port),
        endpoint=settings.kafka_bootstrap,
        probe=health.kafka,
        start_timeout=90,
        hint="Kafka jars are resolved by `make setup` into the cache",
    )
    connect = Service(
        name="connect",
        programs=(Program(
            name="connect",
            command=[java_bin(), f"-Xmx{settings.connect_heap}", f"-Xms{settings.connect_heap}", "-XX:+UseG1GC",
                     "-Djava.awt.headless=true", log4j,
                     # Kafka 4 only honours config providers named in this allowlist.
                     "-Dorg.apache.kafka.automatic.config.providers=org.apache.kafka.common.config.provider.FileConfigProvider,org.apache.kafka.common.config.provider.DirectoryConfigProvider,org.apache.kafka.common.config.provider.EnvVarConfigProvider",
                     # JAAS for the REST API's basic auth: a path; the users and passwords are in a 0600 file.
                     f"-Djava.security.auth.login.config={conf / 'connect' / 'rest-jaas.conf'}",
                     "-cp", kafka_cp, "org.apache.kafka.connect.cli.ConnectDistributed",
                     str(conf / "connect" / "worker.properties")],
            env=env,
            start_secs=30,  # a worker without its Kafka or config topics dies within ~20 s
        ),),
        ports=(settings.connect_port,),
        endpoint=settings.connect_url,
        probe=health.connect,
        status_probe=health.connect_with_tasks,
        start_timeout=120,
        hint="Connect needs Kafka up and the Debezium plugin unpacked by `make setup`",
    )
    metastore_cp = _cp(conf / "hive", pyspark_home() / "jars" / "*", *spark_extra_jars(settings),
                       java_classes_dir(settings))
    metastore = Service(
        name="metastore",
        programs=(Program(
            name="metastore",
            # LakeMetaStore, not HiveMetaStore: Hive 2.3's server binds every interface (see its source).
            command=[java_bin(), f"-Xmx{settings.metastore_heap}", "-Djava.awt.headless=true",
                     f"-Dlog4j2.configurationFile={conf / 'log4j2' / 'metastore.properties'}",
                     "-cp", metastore_cp, "LakeMetaStore", host, str(settings.metastore_port)],
            env={**env, "HADOOP_USER_NAME": "lake"},
            start_secs=30,
        ),),
        ports=(settings.metastore_port,),
        endpoint=settings.metastore_uri,
        probe=health.metastore,
        start_timeout=120,
        hint="the Hive metastore runs from pyspark's Hive 2.3 jars against the stack's PostgreSQL",
    )
    thrift = Service(
        name="thrift",
        programs=(Program(
            name="thrift",
            command=[str(venv_bin() / "spark-submit"), "--class",
                     "org.apache.spark.sql.hive.thriftserver.HiveThriftServer2",
                     "--name", "lake-thrift-server",
                     "--conf", f"spark.driver.memory={settings.thrift_driver_memory}",
                     "--conf", f"spark.hive.server2.thrift.port={settings.thrift_port}",
                     "--conf", f"spark.hive.server2.thrift.bind.host={host}",
                     # Password logins (LakeThriftAuth reads the 0600 users file named in its environment);
                     # the driver's class path is the lake's jars plus our compiled helpers.
                     "--conf", "spark.hive.server2.authentication=CUSTOM",
                     # Hive's CustomAuthenticationProviderImpl reads the class from a new HiveConf (hive-site.xml
                     # and system properties), not from Spark's conf.
                     "--driver-java-options", "-Dhive.server2.custom.authentication.class=LakeThriftAuth",
                     "--driver-class-path", _cp(*spark_extra_jars(settings), java_classes_dir(settings)),
                     *driver_port_args(settings.thrift_driver_port, settings.thrift_block_manager_port),
                     "spark-internal"],
            env={**env, "HADOOP_USER_NAME": "lake", "LAKE_THRIFT_USERS_FILE": str(thrift_users_path(settings))},
            start_secs=60,  # HiveServer2 fails on the metastore or its port after the Spark driver is up
        ),),
        ports=(settings.thrift_port, settings.thrift_driver_port, settings.thrift_block_manager_port),
        endpoint=f"jdbc:hive2://{host}:{settings.thrift_port}/default",
        probe=health.thrift,
        start_timeout=180,
        hint="the Spark Thrift Server needs the metastore and MinIO",
    )
    # The batch layer's Spark driver: Airflow tasks send their plans here over Spark Connect instead of
    # starting a JVM each (a spark-submit costs ~30 s here; a 7-day backfill is dozens of tasks). One
    # long-running driver also makes it the single writer of gold/ops tables (DESIGN.md, single writer).
    # The token comes through the environment (not the command line, which other users can read).
    spark_connect = Service(
        name="spark-connect",
        programs=(Program(
            name="spark-connect",
            command=[str(venv_bin() / "spark-submit"), "--class",
                     "org.apache.spark.sql.connect.service.SparkConnectServer",
                     "--name", "lake-spark-connect",
                     "--conf", f"spark.driver.memory={settings.spark_connect_driver_memory}",
                     "--conf", f"spark.connect.grpc.binding.address={host}",
                     "--conf", f"spark.connect.grpc.binding.port={settings.spark_connect_port}",
                     *driver_port_args(settings.spark_connect_driver_port, settings.spark_connect_block_manager_port),
                     "spark-internal"],
            env={**env, "HADOOP_USER_NAME": "lake", "SPARK_CONNECT_AUTHENTICATE_TOKEN": settings.spark_connect_token},
            start_secs=60,
        ),),
        ports=(settings.spark_connect_port, settings.spark_connect_driver_port,
               settings.spark_connect_block_manager_port),
        endpoint=f"sc://{host}:{settings.spark_connect_port}",
        probe=health.spark_connect,
        start_timeout=180,
        hint="the Spark Connect server needs the metastore and MinIO",
    )
    # The data-quality report: serves the GX Data Docs site and renders the pages validation tasks queue
    # (spark_jobs.quality.docs_server), so no task waits for GX's index rebuild.
    dq_docs = Service(
        name="dq-docs",
        programs=(Program(
            name="dq-docs",
            command=[sys.executable, "-m", "spark_jobs.quality.docs_server", "--bind", host,
                     "--port", str(settings.dq_docs_port)],
            env=env,
        ),),
        ports=(settings.dq_docs_port,),
        endpoint=f"http://{host}:{settings.dq_docs_port}/",
        probe=health.dq_docs,
        start_timeout=30,
        hint="serves and renders the Data Docs site (<state dir>/dq/gx/uncommitted/data_docs/local_site)",
    )
    af_env = {**env, **airflow_env(settings)}
    airflow_bin = str(venv_bin() / "airflow")
    airflow = Service(
        name="airflow",
        programs=(
            Program(name="airflow-api-server",
                    command=[airflow_bin, "api-server", "--host", host, "--port", str(settings.airflow_port),
                             "--workers", "1"], env=af_env, start_secs=20),
            # --skip-serve-logs: the log servers bind every interface on fixed ports (8793, 8794) and only
            # remote workers need them; with the LocalExecutor the API server reads the task log files.
            Program(name="airflow-scheduler", command=[airflow_bin, "scheduler", "--skip-serve-logs"], env=af_env,
                    start_secs=20),
            Program(name="airflow-dag-processor", command=[airflow_bin, "dag-processor"], env=af_env, start_secs=20),
            Program(name="airflow-triggerer", command=[airflow_bin, "triggerer", "--skip-serve-logs"], env=af_env,
                    start_secs=20),
        ),
        ports=(settings.airflow_port,),
        endpoint=settings.airflow_url,
        probe=health.airflow,
        start_timeout=240,
        hint="Airflow needs PostgreSQL; its metadata DB is migrated by `lake stack up`",
    )
    cluster = [spark_cluster(settings, env)] if settings.spark_cluster_workers else []
    return [postgres, minio, kafka, connect, metastore, *cluster, thrift, spark_connect, dq_docs, airflow]


def spark_cluster(settings: Settings, env: dict[str, str]) -> Service:
    """A Spark standalone cluster on this machine (``LAKE_SPARK_CLUSTER_WORKERS`` > 0): a master and N workers
    from pyspark's own distribution, on ``LAKE_HOST`` (``SPARK_LOCAL_IP`` binds their executors there too).

    Executors inherit the workers' environment: the venv's Python (``PYSPARK_PYTHON``) and this repository on
    ``PYTHONPATH``, so ``mapInArrow`` code (the CDC parse) imports the same packages as the driver.
    """
    from spark_jobs.jars import pyspark_home

    spark_class = str(pyspark_home() / "bin" / "spark-class")
    host = settings.host
    master = f"spark://{host}:{settings.spark_cluster_master_port}"
    cluster_env = {**env, "SPARK_NO_DAEMONIZE": "1", "SPARK_LOG_DIR": str(settings.log_dir),
                   "SPARK_WORKER_DIR": str(settings.data_dir / "spark-work")}
    programs = [Program(name="spark-master",
                        command=[spark_class, "org.apache.spark.deploy.master.Master", "--host", host,
                                 "--port", str(settings.spark_cluster_master_port),
                                 "--webui-port", str(settings.spark_cluster_webui_port)],
                        env=cluster_env, start_secs=10)]
    ports = [settings.spark_cluster_master_port, settings.spark_cluster_webui_port]
    for i in range(settings.spark_cluster_workers):
        port = settings.spark_cluster_worker_port + 2 * i
        programs.append(Program(
            name=f"spark-worker-{i + 1}",
            command=[spark_class, "org.apache.spark.deploy.worker.Worker", "--host", host, "--port", str(port),
                     "--webui-port", str(port + 1), "--cores", str(settings.spark_cluster_worker_cores),
                     "--memory", settings.spark_cluster_worker_memory,
                     "--work-dir", str(settings.data_dir / "spark-work" / f"worker-{i + 1}"), master],
            env=cluster_env, start_secs=10))
        ports += [port, port + 1]
    return Service(name="spark-cluster", programs=tuple(programs), ports=tuple(ports), endpoint=master,
                   probe=health.spark_cluster, start_timeout=120,
                   hint="the Spark standalone master and workers from pyspark's distribution (LAKE_SPARK_CLUSTER_*)")


def stream_program(settings: Settings) -> Program:
    """The streaming app, supervised with the stack but started by ``lake stream start``."""
    # SIGTERM to the Python driver only: it stops the queries after their current batch, drains the events
    # archive and exits; its Spark JVM exits with it (the gateway ends when the driver's stdin closes).
    # Signalling the group killed the JVM under the driver, which then failed mid-batch (exit 1).
    # start_secs: Spark's start and the first batch's planning; a driver that fails on its checkpoint, the
    # catalog or Kafka does so within it. A SIGKILLed driver that had run longer is restarted (the kill tests).
    return Program(name="stream", command=[sys.executable, "-m", "spark_jobs.stream"],
                   env=base_env(settings), stop_wait=120, stop_as_group=False, start_secs=45)


def template_values(settings: Settings) -> dict[str, str]:
    return {
        "HOST": settings.host,
        "HOST_URL": f"[{settings.host}]" if ":" in settings.host else settings.host,
        "PG_PORT": str(settings.pg_port),
        "PG_SOCKET_DIR": str(pg_dirs(settings)[1]),
        "PG_HOST": settings.pg_host,
        "METASTORE_DB_USER": settings.pg_metastore_user,  # owner of the metastore database, not a superuser
        "METASTORE_DB_PASSWORD": settings.pg_metastore_password,
        "METASTORE_DB": settings.metastore_db,
        "WAREHOUSE": settings.warehouse_uri,
        "S3_ENDPOINT": settings.s3_endpoint,
        "S3_REGION": settings.s3_region,
        "S3_ACCESS_KEY": settings.s3_access_key,
        "S3_SECRET_KEY": settings.s3_secret_key,
        "KAFKA_PORT": str(settings.kafka_port),
        "KAFKA_CONTROLLER_PORT": str(settings.kafka_controller_port),
        "KAFKA_DATA_DIR": str(settings.data_dir / "kafka"),
        "KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
        "KAFKA_CDC_RETENTION_MS": str(settings.kafka_cdc_retention_ms),
        "KAFKA_CDC_RETENTION_BYTES": str(settings.kafka_cdc_retention_bytes),
        "KAFKA_TOPIC_PARTITIONS": str(settings.kafka_topic_partitions),
        "CONNECT_PORT": str(settings.connect_port),
        "PLUGIN_PATH": str(settings.cache_dir / "jars" / "debezium"),
        "SECRETS_DIR": str(settings.state_dir / "secrets"),
        **kafka_auth.server_template_values(settings),
        "CONNECT_REST_USERS_FILE": str(kafka_auth.connect_rest_users_path(settings)),
    }


def render_configs(settings: Settings) -> None:
    """Render every template into ``<state>/conf`` (private files: some hold secrets)."""
    values = template_values(settings)
    for src in sorted(TEMPLATES.rglob("*")):
        if src.is_file():
            dst = settings.conf_dir / src.relative_to(TEMPLATES)
            write_private(dst, render_template(src.read_text(encoding="utf-8"), values))
    write_private(spark_conf_dir(settings) / "spark-defaults.conf", spark_defaults_text(settings))
    # Connect reads credentials through its FileConfigProvider from here.
    write_private(settings.state_dir / "secrets" / "postgres.properties",
                  f"cdc.user={settings.cdc_user}\ncdc.password={settings.cdc_password}\n")
    for path, text in kafka_auth.connect_secret_files(settings).items():
        write_private(path, text)
    write_private(thrift_users_path(settings), f"{THRIFT_USER}={settings.thrift_password}\n")
    write_private(thrift_password_path(settings), settings.thrift_password)


#: The Thrift server's (JDBC) user; its password is ``LAKE_THRIFT_PASSWORD``.
THRIFT_USER = "lake"


def thrift_users_path(settings: Settings) -> Path:
    """``user=password`` lines that ``infra/thrift/LakeThriftAuth.java`` checks logins against (0600)."""
    return settings.state_dir / "secrets" / "thrift-users.properties"


def thrift_password_path(settings: Settings) -> Path:
    """The password alone (0600), for ``beeline -w <file>``: no password on a command line."""
    return settings.state_dir / "secrets" / "thrift-password"


def check_artifacts(settings: Settings) -> None:
    """Fail early, naming the missing piece, before anything starts."""
    jar_group_dir(settings, "kafka")
    jar_group_dir(settings, "debezium")
    jar_group_dir(settings, "spark")
    minio_binary(settings)
    java_bin()
    build_java_classes(settings)
