"""One frozen, typed settings object for every Lakestream process.

Values come from ``LAKE_*`` environment variables, then from the generated,
git-ignored ``<state dir>/.env`` (secrets made by ``lake stack up``), then from
the defaults below. Every variable is listed in ``.env.example``.

Endpoints (Spark master, Kafka bootstrap, S3, metastore, Airflow) are read only
from here, so the same code runs against the local stack or a cluster.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
_LOCAL_MASTER = re.compile(r"^local(\[(\d+|\*)(,\d+)?\])?$")


#: Spark applications a stack runs on its cluster at once: the streaming app, Spark Connect, Thrift, and one
#: `lake` job (reconcile, bench, sql). A standalone master gives cores and memory first come first served, so the
#: cluster needs room for all of them or the last one waits forever.
CLUSTER_APPS = 4
#: Memory of one executor (Spark's default ``spark.executor.memory``), in MB; an application spreads over the
#: workers, so each worker may hold one executor of every application.
EXECUTOR_MEMORY_MB = 1024

class SettingsError(ValueError):
    """A ``LAKE_*`` variable has a value we cannot use."""


#: The streaming app's queries (``LAKE_STREAM_QUERIES``).
STREAM_QUERIES = ("cdc", "events")

def _parse_env_file(path: Path) -> dict[str, str]:
    """Read ``KEY=VALUE`` lines (``#`` comments, optional quotes)."""
    values: dict[str, str] = {}
    if not path.is_file():
        return values
    for lineno, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if "=" not in line:
            raise SettingsError(f"{path}:{lineno}: expected KEY=VALUE, got {raw!r}")
        key, _, value = line.partition("=")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        values[key.strip()] = value
    return values


def _int(name: str, raw: str) -> int:
    try:
        return int(raw)
    except ValueError:
        raise SettingsError(f"{name}={raw!r} is not an integer; fix it in the environment or .env") from None


def _megabytes(name: str, raw: str) -> int:
    """A JVM-style size (``512m``, ``6g``) in MB."""
    m = re.fullmatch(r"(\d+)([mMgG])", raw.strip())
    if not m:
        raise SettingsError(f"{name}={raw!r} is not a size like 512m or 6g; fix it in the environment or .env")
    return int(m.group(1)) * (1024 if m.group(2) in "gG" else 1)


def _bool(name: str, raw: str) -> bool:
    low = raw.strip().lower()
    if low in {"1", "true", "yes", "on"}:
        return True
    if low in {"0", "false", "no", "off"}:
        return False
    raise SettingsError(f"{name}={raw!r} is not a boolean; use true or false")


@dataclass(frozen=True)
class Settings:
    """Everything configurable about Lakestream. Build with :func:`load_settings`."""

    state_dir: Path
    cache_dir: Path
    host: str

    # PostgreSQL (OLTP source, Airflow metadata, Hive metastore database)
    pg_port: int
    pg_host: str
    pg_superuser: str
    pg_password: str
    pg_os_user: str
    #: OS user every lake process switches to when started by root (spark_jobs.stack.service_user).
    service_user: str
    pg_shop_db: str
    cdc_user: str
    cdc_password: str
    # Least-privilege roles (spark_jobs.stack.bootstrap.configure_postgres): owners of Airflow's and the
    # metastore's databases, and the lake's own reads/writes of the shop tables (stream, loadgen, verify).
    pg_airflow_user: str
    pg_airflow_password: str
    pg_metastore_user: str
    pg_metastore_password: str
    pg_app_user: str
    pg_app_password: str

    # Kafka and Connect
    kafka_port: int
    kafka_controller_port: int
    kafka_bootstrap: str
    kafka_heap: str
    kafka_events_retention_ms: int
    kafka_events_retention_bytes: int
    kafka_cdc_retention_ms: int
    kafka_cdc_retention_bytes: int
    kafka_topic_partitions: int  # of events.clickstream and the CDC topics, when they are created
    # SASL/SCRAM passwords of the Kafka principals (spark_jobs.kafka_auth): the broker's own (PLAIN, controller
    # and inter-broker), the operator's tools, Connect, the streaming app, event producers.
    kafka_broker_password: str
    kafka_tools_password: str
    kafka_connect_password: str
    kafka_stream_password: str
    kafka_producer_password: str
    connect_port: int
    connect_url: str
    connect_rest_password: str  # HTTP basic auth of Connect's REST API (user ``lake``)
    connect_heap: str
    slot_min_safe_wal_mb: int
    stack_min_free_disk_mb: int

    # Object store
    minio_port: int
    minio_console_port: int
    minio_root_user: str
    minio_root_password: str
    s3_endpoint: str
    s3_region: str
    s3_bucket: str
    s3_access_key: str
    s3_secret_key: str

    # Spark and the shared catalog
    spark_master: str
    spark_driver_memory: str
    spark_shuffle_partitions: int
    spark_cluster_workers: int  # 0: no cluster (LAKE_SPARK_MASTER local[...]); N: a standalone master + N workers
    spark_cluster_master_port: int
    spark_cluster_webui_port: int
    spark_cluster_worker_port: int  # worker i (from 0) uses this + 2i (RPC) and + 2i + 1 (web UI)
    spark_cluster_worker_cores: int
    spark_cluster_worker_memory: str
    spark_cores_max: int  # cores one application takes on the cluster (the stream, Connect, Thrift, each job)

    metastore_port: int
    metastore_uri: str
    metastore_heap: str
    thrift_port: int
    thrift_password: str  # JDBC login of user ``lake`` (spark_jobs.stack.services.THRIFT_USER)
    thrift_driver_memory: str
    thrift_driver_port: int
    thrift_block_manager_port: int
    spark_connect_port: int
    spark_connect_driver_memory: str
    spark_connect_driver_port: int
    spark_connect_block_manager_port: int
    spark_connect_token: str

    # Streaming app
    stream_max_offsets_per_trigger: int
    stream_max_records_per_task: int
    stream_trigger_seconds: int
    stream_maintenance_minutes: int
    stream_driver_memory: str
    stream_driver_port: int
    stream_block_manager_port: int
    stream_queries: str
    events_max_offsets_per_trigger: int
    events_trigger_seconds: int
    events_watermark_minutes: int

    # Data quality (spark_jobs.quality): freshness SLOs of the live tables
    dq_docs_port: int
    dq_docs_keep: int  # newest validations per table kept in Data Docs (the index's cost grows with the count)
    dq_freshness_silver_seconds: int
    dq_freshness_hot_seconds: int
    dq_freshness_tables: str  # per-table SLOs "<db>.<table>=<seconds>,...": see dq_freshness_seconds()

    # Airflow
    airflow_port: int
    airflow_url: str
    airflow_admin_user: str
    airflow_admin_password: str
    airflow_parallelism: int
    airflow_scheduler_health_port: int
    airflow_secret_key: str

    def dq_freshness_overrides(self) -> dict[str, int]:
        """``LAKE_DQ_FRESHNESS_TABLES`` (``silver.orders=600,hot.funnel_15m=120``) as table -> seconds."""
        out: dict[str, int] = {}
        for item in filter(None, (part.strip() for part in self.dq_freshness_tables.split(","))):
            table, sep, seconds = item.partition("=")
            if not sep or not re.fullmatch(r"[a-z][a-z0-9_]*\.[a-z][a-z0-9_]*", table.strip()) \
                    or not seconds.strip().isdigit() or int(seconds) < 1:
                raise SettingsError(f"LAKE_DQ_FRESHNESS_TABLES: {item!r} is not <db>.<table>=<seconds >= 1> "
                                    "(e.g. silver.orders=600,hot.funnel_15m=120)")
            out[table.strip()] = int(seconds)
        return out

    def dq_freshness_seconds(self, table: str) -> int:
        """The freshness SLO of ``table``: its ``LAKE_DQ_FRESHNESS_TABLES`` entry, else its layer's default."""
        layer = self.dq_freshness_hot_seconds if table.startswith("hot.") else self.dq_freshness_silver_seconds
        return self.dq_freshness_overrides().get(table, layer)

    @property
    def stream_query_list(self) -> tuple[str, ...]:
        """The streaming app's queries to run, from ``LAKE_STREAM_QUERIES``."""
        return tuple(q.strip() for q in self.stream_queries.split(",") if q.strip())

    @property
    def log_dir(self) -> Path:
        return self.state_dir / "logs"

    @property
    def data_dir(self) -> Path:
        return self.state_dir / "data"

    @property
    def run_dir(self) -> Path:
        return self.state_dir / "run"

    @property
    def conf_dir(self) -> Path:
        return self.state_dir / "conf"

    @property
    def warehouse_uri(self) -> str:
        return f"s3a://{self.s3_bucket}/warehouse"

    @property
    def metastore_db(self) -> str:
        return "metastore"

    @property
    def airflow_db(self) -> str:
        return "airflow"

    @property
    def spark_connect_url(self) -> str:
        """``sc://`` URL of the stack's Spark Connect server, with its bearer token (a secret: never print it).

        Any loopback host gets the token over gRPC local credentials (:func:`spark_jobs.session.connect_session`);
        another host needs TLS.
        """
        host = f"[{self.host}]" if ":" in self.host else self.host
        token = f";token={self.spark_connect_token}" if self.spark_connect_token else ""
        return f"sc://{host}:{self.spark_connect_port}/{token}"

    def pg_dsn(self, database: str | None = None) -> str:
        """libpq DSN for the stack superuser (bootstrap, migrations, health probe, tests: admin use only)."""
        db = database or "postgres"
        return (f"host={self.pg_host} port={self.pg_port} dbname={db} "
                f"user={self.pg_superuser} password={self.pg_password}")

    def pg_app_dsn(self) -> str:
        """libpq DSN of the shop database as the lake's app role: DML on the shop tables, nothing else.

        The stream (column types of added columns), the load generators, ``lake verify`` and
        ``lake connectors status`` (slot position) connect with it, never as the superuser.
        """
        return (f"host={self.pg_host} port={self.pg_port} dbname={self.pg_shop_db} "
                f"user={self.pg_app_user} password={self.pg_app_password}")

    def redacted(self) -> dict[str, str]:
        """All settings as strings with secrets masked, for ``lake`` diagnostics."""
        out: dict[str, str] = {}
        for f in fields(self):
            value = str(getattr(self, f.name))
            if f.name in SECRET_NAMES:
                value = "***" if value else ""
            out[f.name] = value
        return out


# name -> (default, is_secret). Defaults may reference other settings via
# str.format(**resolved) once those are resolved (order matters).
_DEFAULTS: dict[str, str] = {
    "state_dir": str(REPO_ROOT / ".lake"),
    # Root's home is private (0700): the service user must read the jars and binaries, so root's cache is shared.
    "cache_dir": "/var/cache/lakestream" if os.geteuid() == 0 else str(Path.home() / ".cache" / "lakestream"),
    "host": "127.0.0.1",
    "pg_port": "15432",
    "pg_host": "{host}",
    "pg_superuser": "lake_admin",
    "pg_password": "",
    "pg_os_user": "postgres",
    "service_user": "lake",
    "pg_shop_db": "shop",
    "cdc_user": "lake_cdc",
    "cdc_password": "",
    "pg_airflow_user": "lake_airflow",
    "pg_airflow_password": "",
    "pg_metastore_user": "lake_metastore",
    "pg_metastore_password": "",
    "pg_app_user": "lake_app",
    "pg_app_password": "",
    "kafka_port": "19092",
    "kafka_controller_port": "19093",
    "kafka_bootstrap": "{host}:{kafka_port}",
    "kafka_heap": "512m",
    # Kafka keeps a topic's records this long / this many bytes per partition (-1: no limit); bronze is the
    # archive, so this only has to outlast a stopped streaming app (README, Retention).
    "kafka_events_retention_ms": "604800000",
    "kafka_events_retention_bytes": "1073741824",
    "kafka_cdc_retention_ms": "604800000",
    "kafka_cdc_retention_bytes": "1073741824",
    "kafka_topic_partitions": "3",
    "kafka_broker_password": "",
    "kafka_tools_password": "",
    "kafka_connect_password": "",
    "kafka_stream_password": "",
    "kafka_producer_password": "",
    "connect_port": "18083",
    "connect_url": "http://{host}:{connect_port}",
    "connect_rest_password": "",
    "connect_heap": "768m",
    "slot_min_safe_wal_mb": "512",
    "stack_min_free_disk_mb": "5120",
    "minio_port": "19000",
    "minio_console_port": "19001",
    "minio_root_user": "",
    "minio_root_password": "",
    "s3_endpoint": "http://{host}:{minio_port}",
    "s3_region": "us-east-1",
    "s3_bucket": "lake",
    "s3_access_key": "",
    "s3_secret_key": "",
    "spark_master": "local[2]",
    "spark_driver_memory": "2g",
    "spark_cluster_workers": "0",
    "spark_cluster_master_port": "17077",
    "spark_cluster_webui_port": "18085",
    "spark_cluster_worker_port": "17080",
    "spark_cluster_worker_cores": "4",
    "spark_cluster_worker_memory": "6g",
    "spark_cores_max": "2",
    "spark_shuffle_partitions": "4",
    "metastore_port": "19083",
    "metastore_uri": "thrift://{host}:{metastore_port}",
    "metastore_heap": "512m",
    "thrift_port": "10000",
    "thrift_password": "",
    "thrift_driver_memory": "1g",
    # Spark's driver RPC and block manager of each long-running driver (random ports otherwise).
    "thrift_driver_port": "17010",
    "thrift_block_manager_port": "17011",
    "spark_connect_port": "15002",
    "spark_connect_driver_memory": "2g",
    "spark_connect_driver_port": "17020",
    "spark_connect_block_manager_port": "17021",
    "spark_connect_token": "",
    "stream_max_offsets_per_trigger": "100000",
    "stream_max_records_per_task": "10000",
    "stream_trigger_seconds": "2",
    "stream_maintenance_minutes": "60",
    "stream_driver_memory": "2g",
    "stream_driver_port": "17030",
    "stream_block_manager_port": "17031",
    "stream_queries": "cdc,events",
    "events_max_offsets_per_trigger": "200000",
    "events_trigger_seconds": "1",
    "events_watermark_minutes": "10",
    "dq_docs_port": "18090",
    "dq_docs_keep": "50",
    "dq_freshness_silver_seconds": "900",
    "dq_freshness_hot_seconds": "300",
    "dq_freshness_tables": "",
    "airflow_port": "18080",
    "airflow_url": "http://{host}:{airflow_port}",
    "airflow_admin_user": "admin",
    "airflow_admin_password": "",
    "airflow_parallelism": "4",
    "airflow_scheduler_health_port": "18974",
    "airflow_secret_key": "",
}

SECRET_NAMES = (
    "pg_password",
    "cdc_password",
    "pg_airflow_password",
    "pg_metastore_password",
    "pg_app_password",
    "minio_root_user",
    "minio_root_password",
    "s3_access_key",
    "s3_secret_key",
    "airflow_admin_password",
    "airflow_secret_key",
    "spark_connect_token",
    "kafka_broker_password",
    "kafka_tools_password",
    "kafka_connect_password",
    "kafka_stream_password",
    "kafka_producer_password",
    "connect_rest_password",
    "thrift_password",
)


def env_name(field_name: str) -> str:
    return "LAKE_" + field_name.upper()


def defaults() -> Mapping[str, str]:
    """Raw defaults, for ``.env.example`` and its test."""
    return dict(_DEFAULTS)


def load_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """Resolve settings from ``environ`` (default ``os.environ``) and the state dir's ``.env``."""
    env = dict(os.environ if environ is None else environ)
    known = {env_name(n) for n in _DEFAULTS}
    unknown = sorted(k for k in env if k.startswith("LAKE_") and k not in known)
    if unknown:
        raise SettingsError(
            f"unknown setting(s) {', '.join(unknown)}; the valid names are listed in .env.example"
        )
    state_dir = Path(env.get("LAKE_STATE_DIR", _DEFAULTS["state_dir"])).expanduser().resolve()
    file_values = _parse_env_file(state_dir / ".env")
    resolved: dict[str, str] = {}
    for name, default in _DEFAULTS.items():
        key = env_name(name)
        if key in env:
            resolved[name] = env[key]
        elif key in file_values:
            resolved[name] = file_values[key]
        else:
            resolved[name] = default.format(**resolved)
    resolved["state_dir"] = str(state_dir)

    kwargs: dict[str, object] = {}
    for f in fields(Settings):
        raw = resolved[f.name]
        if f.type in ("int", int):
            kwargs[f.name] = _int(env_name(f.name), raw)
        elif f.type in ("bool", bool):
            kwargs[f.name] = _bool(env_name(f.name), raw)
        elif f.type in ("Path", Path):
            kwargs[f.name] = Path(raw).expanduser()
        else:
            kwargs[f.name] = raw
    settings = Settings(**kwargs)  # type: ignore[arg-type]
    _validate(settings)
    return settings


#: Every TCP port the stack listens on, by setting name: each listener binds ``host`` on one of these.
PORT_NAMES = ("pg_port", "kafka_port", "kafka_controller_port", "connect_port", "minio_port", "minio_console_port",
              "metastore_port", "thrift_port", "thrift_driver_port", "thrift_block_manager_port",
              "spark_connect_port", "spark_connect_driver_port", "spark_connect_block_manager_port",
              "stream_driver_port", "stream_block_manager_port", "dq_docs_port", "airflow_port",
              "airflow_scheduler_health_port", "spark_cluster_master_port", "spark_cluster_webui_port",
              "spark_cluster_worker_port")


def _validate(s: Settings) -> None:
    seen: dict[int, str] = {}
    for name in PORT_NAMES:
        port = getattr(s, name)
        if not 1 <= port <= 65535:
            raise SettingsError(f"{env_name(name)}={port} is not a TCP port (1-65535)")
        if port in seen:
            raise SettingsError(f"{env_name(name)} and {env_name(seen[port])} are both {port}; give each its own port")
        seen[port] = name
    if not (_LOCAL_MASTER.match(s.spark_master) or s.spark_master.startswith(("spark://", "k8s://"))
            or s.spark_master == "yarn"):
        raise SettingsError(
            f"LAKE_SPARK_MASTER={s.spark_master!r} is not a Spark master URL; "
            "use local[N], spark://host:7077, k8s://https://... or yarn"
        )
    if not s.s3_endpoint.startswith(("http://", "https://")):
        raise SettingsError(f"LAKE_S3_ENDPOINT={s.s3_endpoint!r} must start with http:// or https://")
    if s.stream_max_offsets_per_trigger < 1 or s.stream_trigger_seconds < 0:
        raise SettingsError("LAKE_STREAM_MAX_OFFSETS_PER_TRIGGER must be >= 1 and LAKE_STREAM_TRIGGER_SECONDS >= 0")
    if s.stream_max_records_per_task < 1:
        raise SettingsError(f"LAKE_STREAM_MAX_RECORDS_PER_TASK={s.stream_max_records_per_task} must be >= 1 (Kafka "
                            "records per Spark task of a CDC batch; 10000 is the default)")
    unknown_queries = sorted(set(s.stream_query_list) - set(STREAM_QUERIES))
    if unknown_queries or not s.stream_query_list:
        raise SettingsError(f"LAKE_STREAM_QUERIES={s.stream_queries!r}: give a comma-separated subset of "
                            f"{','.join(STREAM_QUERIES)} (unknown: {','.join(unknown_queries) or 'none given'})")
    if s.events_max_offsets_per_trigger < 1 or s.events_trigger_seconds < 0 or s.events_watermark_minutes < 1:
        raise SettingsError("LAKE_EVENTS_MAX_OFFSETS_PER_TRIGGER and LAKE_EVENTS_WATERMARK_MINUTES must be >= 1, "
                            "LAKE_EVENTS_TRIGGER_SECONDS >= 0")
    s.dq_freshness_overrides()  # raises on a malformed LAKE_DQ_FRESHNESS_TABLES
    if s.dq_docs_keep < 1:
        raise SettingsError(f"LAKE_DQ_DOCS_KEEP={s.dq_docs_keep} must be >= 1 (validations kept per table in Data Docs)")
    if s.dq_freshness_silver_seconds < 1 or s.dq_freshness_hot_seconds < 1:
        raise SettingsError(f"LAKE_DQ_FRESHNESS_SILVER_SECONDS={s.dq_freshness_silver_seconds} and "
                            f"LAKE_DQ_FRESHNESS_HOT_SECONDS={s.dq_freshness_hot_seconds} must both be >= 1 (seconds)")
    for name in ("kafka_events_retention_ms", "kafka_events_retention_bytes", "kafka_cdc_retention_ms",
                 "kafka_cdc_retention_bytes"):
        if getattr(s, name) < -1 or getattr(s, name) == 0:
            raise SettingsError(f"{env_name(name)}={getattr(s, name)} must be -1 (no limit) or > 0")
    if s.kafka_topic_partitions < 1:
        raise SettingsError(f"LAKE_KAFKA_TOPIC_PARTITIONS={s.kafka_topic_partitions} must be >= 1 (partitions of each "
                            "lake topic when it is created: the streaming queries read them as parallel tasks)")
    if s.slot_min_safe_wal_mb < 0 or s.stack_min_free_disk_mb < 0:
        raise SettingsError(f"LAKE_SLOT_MIN_SAFE_WAL_MB={s.slot_min_safe_wal_mb} and LAKE_STACK_MIN_FREE_DISK_MB="
                            f"{s.stack_min_free_disk_mb} must be >= 0 (MB; 0 turns the warning off)")
    cluster_master = f"spark://{s.host}:{s.spark_cluster_master_port}"
    if s.spark_cluster_workers < 0 or s.spark_cluster_worker_cores < 1 or s.spark_cores_max < 1:
        raise SettingsError(f"LAKE_SPARK_CLUSTER_WORKERS={s.spark_cluster_workers} must be >= 0 and "
                            f"LAKE_SPARK_CLUSTER_WORKER_CORES={s.spark_cluster_worker_cores}, LAKE_SPARK_CORES_MAX="
                            f"{s.spark_cores_max} >= 1")
    slots, wanted = s.spark_cluster_workers * s.spark_cluster_worker_cores, CLUSTER_APPS * s.spark_cores_max
    if s.spark_cluster_workers and slots < wanted:
        raise SettingsError(f"LAKE_SPARK_CLUSTER_WORKERS={s.spark_cluster_workers} x LAKE_SPARK_CLUSTER_WORKER_CORES="
                            f"{s.spark_cluster_worker_cores} = {slots} core slots, but the stack runs {CLUSTER_APPS} "
                            f"Spark applications at once (streaming app, Spark Connect, Thrift, one `lake` job) of "
                            f"LAKE_SPARK_CORES_MAX={s.spark_cores_max} cores each ({wanted}): an application that "
                            "gets no core waits forever. Raise LAKE_SPARK_CLUSTER_WORKER_CORES (slots, not CPUs: "
                            "the OS shares the machine's cores) or lower LAKE_SPARK_CORES_MAX")
    worker_mb = _megabytes("LAKE_SPARK_CLUSTER_WORKER_MEMORY", s.spark_cluster_worker_memory)
    if s.spark_cluster_workers and worker_mb < CLUSTER_APPS * EXECUTOR_MEMORY_MB:
        raise SettingsError(f"LAKE_SPARK_CLUSTER_WORKER_MEMORY={s.spark_cluster_worker_memory} holds fewer than "
                            f"{CLUSTER_APPS} executors of {EXECUTOR_MEMORY_MB} MB (streaming app, Spark Connect, "
                            "Thrift, one `lake` job, each with an executor on every worker): the last application "
                            f"would wait forever; set it to at least {CLUSTER_APPS * EXECUTOR_MEMORY_MB // 1024}g")
    if s.spark_cluster_workers and s.spark_master != cluster_master:
        raise SettingsError(f"LAKE_SPARK_CLUSTER_WORKERS={s.spark_cluster_workers} starts a Spark cluster at "
                            f"{cluster_master}, but LAKE_SPARK_MASTER={s.spark_master!r}: set "
                            "LAKE_SPARK_MASTER=spark://{host}:{spark_cluster_master_port} to run on it (or "
                            "LAKE_SPARK_CLUSTER_WORKERS=0)")
    if s.spark_shuffle_partitions < 1:
        raise SettingsError("LAKE_SPARK_SHUFFLE_PARTITIONS must be >= 1")
