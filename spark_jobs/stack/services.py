"""The stack's services: how each is launched, prepared and probed.

Each :class:`Service` carries its own steps of ``lake stack up`` (hooks), so the lifecycle in
``stack.manager`` has no per-service special cases.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from spark_jobs import kafka_auth
from spark_jobs.jars import java_bin, java_classes_dir, pyspark_home, spark_extra_jars
from spark_jobs.session import DELTA_CONF, STREAM_PROGRAM, driver_ports_conf, spark_conf_dir
from spark_jobs.settings import REPO_ROOT, Settings
from spark_jobs.stack import bootstrap, health
from spark_jobs.stack.configs import thrift_users_path
from spark_jobs.stack.postgres import configure as configure_postgres
from spark_jobs.stack.postgres import init_postgres, pg_dirs
from spark_jobs.stack.tools import MINIO_BIN_NAME, classpath, pg_bin, venv_bin

#: A step of ``lake stack up`` for one service.
Hook = Callable[[Settings], None]

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
    #: Settings naming the ports it binds on ``LAKE_HOST`` (checked free before a start; the error names them).
    port_settings: tuple[str, ...] = ()
    #: Before its programs are started (not when they already run): initdb, storage format, DB migration.
    prepare: Hook | None = None
    #: Once its process runs, before the real probe, and on every ``up`` of a running service; retried until
    #: it works or ``start_timeout`` passes (e.g. Kafka's SCRAM users, which the probe itself logs in with).
    pre_probe: Hook | None = None
    #: What ``pre_probe`` does, for its error ("could not <this> at <endpoint>: ...").
    pre_probe_what: str = ""
    #: Once healthy, also on an already running service (idempotent: a changed password, a new migration or
    #: an added pool applies at the next ``up``).
    after_start: Hook | None = None

    @property
    def main(self) -> str:
        return self.programs[0].name


def base_env(settings: Settings) -> dict[str, str]:
    """Environment every supervised program gets (PATH with our venv first)."""
    path = f"{venv_bin()}:{os.environ.get('PATH', '/usr/local/bin:/usr/bin:/bin')}"
    env = {
        "PATH": path,
        "HOME": os.environ.get("HOME", str(settings.state_dir / "home")),
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


def driver_port_args(driver_port: int, block_manager_port: int) -> list[str]:
    return [w for k, v in driver_ports_conf(driver_port, block_manager_port).items() for w in ("--conf", f"{k}={v}")]


def analyst_guard_conf(settings: Settings) -> dict[str, str]:
    """Spark properties of the servers analysts log in to (Thrift, Spark Connect): they run SQL as the service
    user, so they may neither load code nor touch local files (infra/guard, docs/security.md "Security model").

    The local file system allows only the servers' own scratch folders (Hive's session dirs, Spark's temp files
    under the JVM's temp dir), and never the state dir, the artifact cache, the repository or the home folder,
    even when one of them lies under the temp dir.
    """
    # Hive's session scratch dirs (hive.exec.scratchdir /tmp/hive, the local ones) and Spark's are in here.
    tmp = tempfile.gettempdir()
    denied = [settings.state_dir, settings.cache_dir, REPO_ROOT, Path(os.environ.get("HOME", settings.state_dir))]
    return {
        "spark.sql.extensions": f"{DELTA_CONF['spark.sql.extensions']},LakeAnalystGuard",
        "spark.lake.guard.allowedPathPrefix": f"s3a://{settings.s3_bucket}/",
        "spark.hadoop.fs.file.impl": "LakeLocalFileSystem",
        "spark.hadoop.lake.guard.fs.allowedRoots": tmp,
        "spark.hadoop.lake.guard.fs.deniedRoots": ",".join(str(p) for p in denied),
        # The jars are on the driver's and executors' class paths (spark-defaults.conf); spark.jars would have
        # spark-submit read them through the guarded local file system, which refuses the cache.
        "spark.jars": "",
    }


def analyst_guard_args(settings: Settings) -> list[str]:
    return [w for k, v in analyst_guard_conf(settings).items() for w in ("--conf", f"{k}={v}")]


def init_catalog(settings: Settings) -> None:
    """Create the shared catalog's tables in PostgreSQL's metastore database once (infra/metastore), so Spark
    processes starting together do not race on DataNucleus' CREATE TABLE. Nothing to do for an external
    metastore service (``LAKE_METASTORE_URI``)."""
    if settings.metastore_uri:
        return
    cp = classpath(settings.conf_dir / "hive", pyspark_home() / "jars" / "*", *spark_extra_jars(settings),
                   java_classes_dir(settings))
    proc = subprocess.run(
        [java_bin(), "-Xmx512m", "-Djava.awt.headless=true",
         f"-Dlog4j2.configurationFile={settings.conf_dir / 'log4j2' / 'metastore.properties'}",
         "-cp", cp, "LakeMetastoreInit"],
        env={**base_env(settings), "HADOOP_USER_NAME": "lake"}, capture_output=True, text=True, check=False,
        timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"creating the catalog's schema in PostgreSQL's {settings.metastore_db} database failed "
                           f"(LakeMetastoreInit exit {proc.returncode}); is PostgreSQL up?\n"
                           f"{(proc.stdout + proc.stderr)[-3000:]}")


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
        port_settings=("pg_port",),
        prepare=init_postgres,
        after_start=configure_postgres,
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
        port_settings=("minio_port", "minio_console_port"),
        pre_probe=bootstrap.configure_minio,
        pre_probe_what="create the lake's bucket, policy and user",
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
        port_settings=("kafka_port", "kafka_controller_port"),
        prepare=bootstrap.format_kafka,
        pre_probe=kafka_auth.ensure_principals,
        pre_probe_what="create the SASL principals and ACLs",
        after_start=bootstrap.ensure_topic_retention,
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
        port_settings=("connect_port",),
        hint="Connect needs Kafka up and the Debezium plugin unpacked by `make setup`",
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
                     "--driver-class-path", classpath(*spark_extra_jars(settings), java_classes_dir(settings)),
                     *analyst_guard_args(settings),
                     *driver_port_args(settings.thrift_driver_port, settings.thrift_block_manager_port),
                     "spark-internal"],
            env={**env, "HADOOP_USER_NAME": "lake", "LAKE_THRIFT_USERS_FILE": str(thrift_users_path(settings))},
            start_secs=60,  # HiveServer2 fails on the metastore or its port after the Spark driver is up
        ),),
        ports=(settings.thrift_port, settings.thrift_driver_port, settings.thrift_block_manager_port),
        endpoint=f"jdbc:hive2://{host}:{settings.thrift_port}/default",
        probe=health.thrift,
        start_timeout=180,
        port_settings=("thrift_port", "thrift_driver_port", "thrift_block_manager_port"),
        # The first Spark process of `lake stack up`: the catalog's schema is created before any starts.
        prepare=init_catalog,
        hint="the Spark Thrift Server needs PostgreSQL's metastore database and MinIO",
    )
    # The batch layer's Spark driver: Airflow tasks send their plans here over Spark Connect instead of
    # starting a JVM each (a spark-submit costs ~30 s here; a 7-day backfill is dozens of tasks). One
    # long-running driver also makes it the single writer of gold/ops tables (DESIGN.md, single writer).
    # The token comes through the environment (not the command line, which other users can read).
    spark_connect = Service(
        name="spark-connect",
        programs=(Program(
            name="spark-connect",
            # Our main (infra/connect/LakeConnectServer.java): Spark's own forces session artifact isolation,
            # whose per-class RPC lookups hung queries; no session has artifacts (LakeConnectGuard).
            command=[str(venv_bin() / "spark-submit"), "--class", "LakeConnectServer",
                     "--name", "lake-spark-connect",
                     "--conf", f"spark.driver.memory={settings.spark_connect_driver_memory}",
                     "--conf", f"spark.connect.grpc.binding.address={host}",
                     "--conf", f"spark.connect.grpc.binding.port={settings.spark_connect_port}",
                     "--conf", "spark.connect.grpc.interceptor.classes=LakeConnectGuard",
                     "--driver-class-path", classpath(*spark_extra_jars(settings), java_classes_dir(settings)),
                     *analyst_guard_args(settings),
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
        port_settings=("spark_connect_port", "spark_connect_driver_port", "spark_connect_block_manager_port"),
        # The serving database, watermark table and views (those whose sources exist), also on a running server.
        after_start=bootstrap.ensure_serving_views,
        hint="the Spark Connect server needs PostgreSQL's metastore database and MinIO",
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
        port_settings=("dq_docs_port",),
        prepare=bootstrap.prepare_data_docs,
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
        port_settings=("airflow_port", "airflow_scheduler_health_port"),
        prepare=lambda s: bootstrap.prepare_airflow(s, {**base_env(s), **airflow_env(s)}),
        # Also on a running Airflow: pools added by an upgrade appear.
        after_start=lambda s: bootstrap.ensure_pools(s.state_dir / "airflow",
                                                     {**os.environ, **base_env(s), **airflow_env(s)}),
        hint="Airflow needs PostgreSQL; its metadata DB is migrated by `lake stack up`",
    )
    cluster = [spark_cluster(settings, env)] if settings.spark_cluster_workers else []
    return [postgres, minio, kafka, connect, *cluster, thrift, spark_connect, dq_docs, airflow]


def spark_cluster(settings: Settings, env: dict[str, str]) -> Service:
    """A Spark standalone cluster on this machine (``LAKE_SPARK_CLUSTER_WORKERS`` > 0): a master and N workers
    from pyspark's own distribution, on ``LAKE_HOST`` (``SPARK_LOCAL_IP`` binds their executors there too).

    Executors inherit the workers' environment: the venv's Python (``PYSPARK_PYTHON``) and this repository on
    ``PYTHONPATH``, so ``mapInArrow`` code (the CDC parse) imports the same packages as the driver.
    """
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
    return Program(name=STREAM_PROGRAM, command=[sys.executable, "-m", "spark_jobs.streaming.app"],
                   env=base_env(settings), stop_wait=120, stop_as_group=False, start_secs=45)


