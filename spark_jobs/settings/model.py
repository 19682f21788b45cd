"""The settings model: every ``LAKE_*`` variable as a typed field with its default and what it is for.

A field's ``description`` is also its comment in ``.env.example`` (:mod:`spark_jobs.settings.env_example`).
Secrets are ``SecretStr`` fields named ``<name>_secret`` so no repr or log shows them; ``settings.<name>`` gives
the plain value to the code that hands it to a service.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Self, overload

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from spark_jobs.settings.validation import (
    CLUSTER_APPS,
    EXECUTOR_MEMORY_MB,
    LOCAL_MASTER,
    PORT_NAMES,
    STREAM_QUERIES,
    SettingsError,
    env_name,
    freshness_overrides,
    megabytes,
)

REPO_ROOT = Path(__file__).resolve().parents[2]

_GENERATED = "secret: generated per installation"


def _secret(env: str, description: str | None = _GENERATED) -> Any:
    """A per-installation secret read from ``env`` (``lake stack up`` generates it into ``<state dir>/.env``).

    ``description=None``: one of a group that the comment of the group's first field describes.
    """
    return Field(SecretStr(""), validation_alias=env, description=description)


class _Plain:
    """``settings.<name>``: the plain text of the ``<name>_secret`` field, for code that hands it to a service."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.field = f"{name}_secret"

    @overload
    def __get__(self, obj: None, owner: type) -> _Plain: ...
    @overload
    def __get__(self, obj: object, owner: type) -> str: ...
    def __get__(self, obj: object, owner: type) -> _Plain | str:
        if obj is None:
            return self
        secret: SecretStr = getattr(obj, self.field)
        return secret.get_secret_value()


class Settings(BaseSettings):
    """Everything configurable about Lakestream. Build with :func:`spark_jobs.settings.load_settings`."""

    model_config = SettingsConfigDict(env_prefix="LAKE_", env_file_encoding="utf-8",
                                      frozen=True, extra="ignore", ignored_types=(_Plain,))

    state_dir: Path = Field(REPO_ROOT / ".lake", description="data, logs, generated configs and secrets of the local stack")
    # Root's home is private (0700) and the service user must read the jars and binaries: root's cache is shared.
    cache_dir: Path = Field(Path("/var/cache/lakestream") if os.geteuid() == 0 else Path.home() / ".cache" / "lakestream",
                            description="downloaded/built artifacts (Maven jars, MinIO binary); "
                                        "/var/cache/lakestream when run as root")
    host: str = Field("127.0.0.1", description="loopback address every local service binds to")

    # PostgreSQL: the OLTP source, Airflow's metadata and the Hive metastore's database
    pg_port: int = 15432
    pg_host: str = "{host}"
    pg_superuser: str = "lake_admin"
    pg_password_secret: SecretStr = _secret("LAKE_PG_PASSWORD")
    pg_os_user: str = Field("postgres", description=(
        "OS user PostgreSQL runs as when lake is started by root and stays root (LAKE_SERVICE_USER unreachable "
        "or root)"))
    service_user: str = Field("lake", description=(
        "OS user every lake process (CLI, supervisord, services, stream) switches to when started by root; "
        "created if missing. root keeps root."))
    pg_shop_db: str = "shop"
    cdc_user: str = "lake_cdc"
    cdc_password_secret: SecretStr = _secret("LAKE_CDC_PASSWORD")
    pg_airflow_user: str = Field("lake_airflow", description=(
        "Non-superuser roles (spark_jobs.stack.bootstrap.configure_postgres): owner of the airflow database (Airflow "
        "connects as it), owner of the metastore database (the Hive metastore's JDBC user), and the lake's app role "
        "(stream, loadgen, verify: DML on the shop tables only). docs/security.md, PostgreSQL roles."))
    pg_airflow_password_secret: SecretStr = _secret("LAKE_PG_AIRFLOW_PASSWORD")
    pg_metastore_user: str = "lake_metastore"
    pg_metastore_password_secret: SecretStr = _secret("LAKE_PG_METASTORE_PASSWORD")
    pg_app_user: str = "lake_app"
    pg_app_password_secret: SecretStr = _secret("LAKE_PG_APP_PASSWORD")

    # Kafka and Connect
    kafka_port: int = 19092
    kafka_controller_port: int = 19093
    kafka_bootstrap: str = Field("{host}:{kafka_port}",
                                 description="Kafka bootstrap list; point at a multi-broker cluster to scale out")
    kafka_heap: str = "512m"
    kafka_events_retention_ms: int = Field(604800000, description=(
        "Retention of events.clickstream and of the CDC topics (shop.*), set when the topics are created (stack up, "
        "the connector) and on existing topics: ms and bytes per partition, -1 = no limit. Bronze keeps every "
        "record forever; Kafka only has to hold what the streaming app has not archived yet (docs/operations.md, Retention)."))
    kafka_events_retention_bytes: int = 1073741824
    kafka_cdc_retention_ms: int = 604800000
    kafka_cdc_retention_bytes: int = 1073741824
    kafka_cdc_min_compaction_lag_ms: int = Field(604800000, gt=0, description=(
        "The CDC topics are log-compacted (cleanup.policy=compact: Kafka keeps the newest record per key, bronze keeps "
        "every change; their retention.* above then deletes nothing). Compaction may drop a superseded record once it "
        "is this old (min.compaction.lag.ms): keep it longer than the longest stream outage the lake tolerates; "
        "`lake stack status` warns at LAKE_RETENTION_WARN_FRACTION of it (docs/operations.md, Replay (Kappa))"))
    kafka_topic_partitions: int = Field(3, description=(
        "Partitions of events.clickstream and of each CDC topic when it is created (not changed on existing topics: "
        "that would move keys between partitions). Each partition is read as its own Spark task."))
    kafka_broker_password_secret: SecretStr = _secret("LAKE_KAFKA_BROKER_PASSWORD", (
        "SASL/SCRAM passwords of the Kafka principals (spark_jobs.kafka_auth): the broker's own (PLAIN, controller "
        "and inter-broker), the operator's tools, Connect, the streaming app, event producers; see docs/security.md, Kafka "
        "security. Secrets: generated per state dir by `lake stack up`."))
    kafka_tools_password_secret: SecretStr = _secret("LAKE_KAFKA_TOOLS_PASSWORD", None)
    kafka_connect_password_secret: SecretStr = _secret("LAKE_KAFKA_CONNECT_PASSWORD", None)
    kafka_stream_password_secret: SecretStr = _secret("LAKE_KAFKA_STREAM_PASSWORD", None)
    kafka_producer_password_secret: SecretStr = _secret("LAKE_KAFKA_PRODUCER_PASSWORD", None)
    connect_port: int = 18083
    connect_url: str = "http://{host}:{connect_port}"
    connect_rest_password_secret: SecretStr = _secret("LAKE_CONNECT_REST_PASSWORD", (
        "Connect REST API: HTTP basic auth as user `lake` with this password. Secret: generated by `lake stack up`."))
    connect_heap: str = "768m"
    slot_min_safe_wal_mb: int = Field(512, description=(
        "`lake connectors status` warns when the replication slot can keep less WAL than this before it is lost"))
    stack_min_free_disk_mb: int = Field(5120, description=(
        "`lake stack status` warns when the state dir's disk has less free space than this"))
    retention_warn_fraction: float = Field(0.5, gt=0, description=(
        "`lake stack status` warns when a record the streaming app has not processed yet has used this fraction of "
        "its topic's retention (its age against retention.ms, the bytes after it in its partition against "
        "retention.bytes): past retention Kafka deletes it before bronze archived it (docs/operations.md, Retention)"))
    retention_fail_fraction: float = Field(0.8, gt=0, description=(
        "... and fails (exit 1) past this fraction"))

    # Object store
    minio_port: int = 19000
    minio_console_port: int = 19001
    minio_root_user_secret: SecretStr = _secret("LAKE_MINIO_ROOT_USER")
    minio_root_password_secret: SecretStr = _secret("LAKE_MINIO_ROOT_PASSWORD")
    s3_endpoint: str = Field("http://{host}:{minio_port}",
                             description="S3 endpoint; for AWS S3 use https://s3.<region>.amazonaws.com")
    s3_region: str = "us-east-1"
    s3_bucket: str = "lake"
    s3_access_key_secret: SecretStr = _secret("LAKE_S3_ACCESS_KEY")
    s3_secret_key_secret: SecretStr = _secret("LAKE_S3_SECRET_KEY")
    s3_noncurrent_days: int = Field(7, ge=1, description=(
        "The bucket is versioned: an overwritten or deleted object stays restorable (`lake restore-path`) for this "
        "many days, then MinIO expires the old version (set by `lake stack up`; docs/operations.md, Versioning and restore)"))

    # Spark and the shared catalog
    spark_master: str = Field("local[2]", description="local[N], spark://host:7077, k8s://https://... or yarn")
    spark_cluster_workers: int = Field(0, description=(
        "A local Spark standalone cluster, supervised with the stack (0 = none: the drivers run local[...]). With "
        "N > 0, set LAKE_SPARK_MASTER=spark://{host}:{spark_cluster_master_port}: the streaming app, Spark Connect, "
        "the Thrift server and every job then run their tasks on the cluster's executors, unchanged "
        "(`make test-cluster`)."))
    spark_cluster_master_port: int = 17077
    spark_cluster_webui_port: int = 18085
    spark_cluster_worker_port: int = Field(17080, description=(
        "worker i (from 0) listens on this + 2i (RPC) and this + 2i + 1 (web UI)"))
    spark_cluster_worker_cores: int = 4
    spark_cluster_worker_memory: str = "6g"
    spark_cores_max: int = Field(2, description=(
        "cores one application takes on the cluster (the stream, Spark Connect, Thrift, each job)"))
    spark_driver_memory: str = "2g"
    spark_shuffle_partitions: int = 4
    metastore_uri: str = Field("", description=(
        "empty: every Spark process reads and writes the shared catalog in PostgreSQL's metastore database itself "
        "(Hive's embedded metastore, credentials from its 0600 spark-defaults.conf; no catalog port). "
        "thrift://host:9083: an external, authenticated Hive metastore service instead"))
    spark_auth_secret_secret: SecretStr = _secret("LAKE_SPARK_AUTH_SECRET", (
        "shared secret of Spark's RPC authentication (spark.authenticate) between the stack's drivers, executors "
        "and standalone master/workers; only in the 0600 spark-defaults.conf. Secret: generated by `lake stack up`."))
    spark_network_crypto: bool = Field(True, description=(
        "encrypt Spark RPC and block transfers (spark.network.crypto.enabled; cost: docs/benchmarks.md)"))
    thrift_port: int = 10000
    thrift_password_secret: SecretStr = _secret("LAKE_THRIFT_PASSWORD", (
        "JDBC login (user `lake`, spark_jobs.stack.services.THRIFT_USER) of the Thrift server. Secret: generated "
        "by `lake stack up`."))
    thrift_driver_memory: str = "1g"
    thrift_driver_port: int = Field(17010, description=(
        "Spark driver RPC and block manager ports of the Thrift server, the Spark Connect server and the stream "
        "(random ports otherwise)"))
    thrift_block_manager_port: int = 17011
    spark_connect_port: int = Field(15002, description=(
        "Spark Connect server of the stack: the long-running Spark driver Airflow's gold and data-quality tasks run "
        "their work in (sc://, bearer token; loopback only without TLS)"))
    spark_connect_driver_memory: str = "2g"
    spark_connect_driver_port: int = 17020
    spark_connect_block_manager_port: int = 17021
    spark_connect_token_secret: SecretStr = _secret("LAKE_SPARK_CONNECT_TOKEN")

    # Streaming app
    stream_max_offsets_per_trigger: int = Field(100000, description=(
        "streaming app: back-pressure (Kafka records per micro-batch), trigger interval, how often it "
        "compacts/vacuums the tables it owns, driver heap"))
    stream_max_records_per_task: int = Field(10000, description=(
        "CDC batches: at most this many Kafka records per Spark task (maxRecordsPerPartition). Records with TOASTed "
        "text are 10-30 KB; smaller tasks keep the driver's heap from holding a whole backlog batch."))
    stream_trigger_seconds: int = 2
    cdc_task_merge_max_mb: int = Field(128, description=(
        "CDC: a silver table whose files exceed this many MB leaves the delta-rs MERGE in a Spark task (copy-on-write: "
        "each batch rewrites every file holding a changed row, with random updates the whole table) for Spark's MERGE "
        "with deletion vectors (a fixed cost of seconds per batch, but not growing with the table); one-way. 0: never."))
    stream_maintenance_minutes: int = 60
    stream_driver_memory: str = Field("6g", description=(
        "Heap of the streaming app's JVM: in local mode its executors too (the Kafka batches, the parse, the MERGE "
        "sources). About 12 of 24 GiB are free with the whole stack running; 2g spent a third of the CPU in GC."))
    stream_java_options: str = Field(
        "-XX:Tier4InvocationThreshold=50000 -XX:Tier4MinInvocationThreshold=6000 -XX:Tier4CompileThreshold=150000",
        description=(
            "JVM options of the streaming app's driver (space-separated, each starting with '-'). The default lets "
            "the JIT's C2 compiler wait ten times longer for a method: every micro-batch plans its commands again, "
            "and C2 compiling the planner's methods one by one took a third of the stream JVM's CPU under load "
            "(docs/benchmarks.md, The stream's JIT compilers). Empty: the JVM's defaults."))
    stream_compact_minutes: int = Field(10, description=(
        "how often the streaming app compacts the tables it writes through Spark (0 = never): OPTIMIZE of the "
        "append-only tables beside the batches, of the MERGE targets between them; Delta's auto compaction in the "
        "writes is off in the stream (docs/architecture.md, Table maintenance)"))
    stream_compact_file_mb: int = Field(128, description=(
        "the file size the stream's OPTIMIZE writes (MB); files under half of it are compacted, larger ones are left "
        "alone, so each run rewrites what arrived since the last one, not the day's data again (Delta's defaults "
        "of 1 GB rewrote the day's files every run)"))
    stream_log_jobs: bool = Field(False, description=(
        "log every micro-batch's Spark jobs by call site and count (which commands a batch issues; off by default)"))
    stream_default_parallelism: int = Field(0, description=(
        "spark.default.parallelism of the streaming app (0: Spark's default, the cores of local[*] or the cluster). "
        "Shuffles take LAKE_SPARK_SHUFFLE_PARTITIONS."))
    stream_max_restarts: int = Field(3, ge=0, description=(
        "`lake stack status` fails (exit 1, the last error named) when supervisord restarted the stream after "
        "unexpected exits more than this many times within LAKE_STREAM_RESTART_WINDOW_MINUTES: a crash loop whose "
        "every run outlives its start time, which supervisord itself never gives up on"))
    stream_restart_window_minutes: int = Field(10, ge=1)
    stream_driver_port: int = 17030
    stream_block_manager_port: int = 17031
    stream_queries: str = Field("cdc,events",
                                description="Which queries the streaming app runs (comma-separated subset of cdc,events)")
    events_max_offsets_per_trigger: int = Field(200000, description=(
        "Events query: batch bound, trigger interval, event-time watermark (late beyond it: kept, counted, "
        "not windowed)"))
    events_trigger_seconds: int = Field(1, description=(
        "Trigger interval of the events query (lake_events: the hot tables, then bronze, silver.events, quarantine)"))
    events_watermark_minutes: int = 10
    events_state_partitions: int = Field(2, description=(
        "Partitions of the events query's de-duplication state (one RocksDB instance each). Fixed in the query's "
        "checkpoint at its first batch (Spark keeps it in the offset log): a new value applies only to a new state dir; "
        "on an existing checkpoint Spark keeps the old one."))

    # Replay (spark_jobs.replay, `lake replay`, DAG lake_replay)
    replay_rollback_hours: float = Field(72, gt=0, description=(
        "`lake replay rollback TABLE` is offered this long after a switch (recorded in ops.replays); it also needs "
        "the version's files, which VACUUM keeps for the table's delta.deletedFileRetentionDuration (7 days for "
        "silver, 1 hour for the hot tables): docs/operations.md, Replay (Kappa)"))
    replay_diff_sample: int = Field(5, ge=0, description=(
        "rows per kind (only live, only replayed, changed) the replay's diff prints"))

    # Data quality (spark_jobs.quality)
    dq_docs_port: int = Field(18090, description="static HTTP server of the Great Expectations Data Docs (loopback)")
    dq_docs_user: str = Field("lake", description=(
        "Data Docs login (HTTP basic auth on every page and asset) as this user with LAKE_DQ_DOCS_PASSWORD"))
    dq_docs_password_secret: SecretStr = _secret("LAKE_DQ_DOCS_PASSWORD")
    dq_docs_keep: int = Field(50, description=(
        "Data Docs keeps the newest N validations per table (pages and stored results; rebuilding the index reads "
        "them all, so its cost stays bounded); the whole history stays in ops.dq_results and the trend page."))
    dq_freshness_tables: str = Field("", description=(
        "Per-table freshness SLOs (severity warn) overriding the ones the table registry declares "
        "(freshness_slo_seconds in spark_jobs/contracts/tables.py: 900 for silver, 300 for hot): "
        "<db>.<table>=<seconds>,... (e.g. silver.products=86400)"))

    # Airflow
    airflow_port: int = 18080
    airflow_url: str = Field("http://{host}:{airflow_port}", description="Airflow API server base URL")
    airflow_admin_user: str = "admin"
    airflow_admin_password_secret: SecretStr = _secret("LAKE_AIRFLOW_ADMIN_PASSWORD")
    airflow_parallelism: int = 4
    airflow_scheduler_health_port: int = Field(18974, description="the scheduler's health-check server (on LAKE_HOST)")
    airflow_secret_key_secret: SecretStr = _secret("LAKE_AIRFLOW_SECRET_KEY")

    # Plain values of the secrets above, for the code that passes them to a service. Never print them.
    pg_password = _Plain()
    cdc_password = _Plain()
    pg_airflow_password = _Plain()
    pg_metastore_password = _Plain()
    pg_app_password = _Plain()
    kafka_broker_password = _Plain()
    kafka_tools_password = _Plain()
    kafka_connect_password = _Plain()
    kafka_stream_password = _Plain()
    kafka_producer_password = _Plain()
    connect_rest_password = _Plain()
    minio_root_user = _Plain()
    minio_root_password = _Plain()
    s3_access_key = _Plain()
    s3_secret_key = _Plain()
    thrift_password = _Plain()
    dq_docs_password = _Plain()
    spark_connect_token = _Plain()
    spark_auth_secret = _Plain()
    airflow_admin_password = _Plain()
    airflow_secret_key = _Plain()

    @model_validator(mode="before")
    @classmethod
    def _derive_endpoints(cls, data: Any) -> Any:
        """An unset endpoint follows ``host`` and its port: ``kafka_bootstrap`` defaults to ``{host}:{kafka_port}``."""
        if not isinstance(data, dict):
            return data
        base = defaults()
        raw = {**base, **data}
        derived = {name: default.format(**raw) for name, default in base.items() if name not in data and "{" in default}
        return {**data, **derived}

    @field_validator("state_dir", "cache_dir")
    @classmethod
    def _expand_home(cls, path: Path) -> Path:
        return path.expanduser()

    @model_validator(mode="after")
    def _check(self) -> Self:
        check(self)
        return self

    def dq_freshness_overrides(self) -> dict[str, int]:
        """``LAKE_DQ_FRESHNESS_TABLES`` (``silver.orders=600,hot.funnel_15m=120``) as table -> seconds."""
        return freshness_overrides(self.dq_freshness_tables)

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
        for name, value in self:
            if isinstance(value, SecretStr):
                out[name.removesuffix("_secret")] = "***" if value.get_secret_value() else ""
            else:
                out[name] = str(value)
        return out


def public_name(field_name: str) -> str:
    """The setting's name without the ``_secret`` suffix of a secret's field: ``LAKE_<NAME>`` is its variable."""
    return field_name.removesuffix("_secret") if Settings.model_fields[field_name].annotation is SecretStr \
        else field_name


#: Secret settings by name (``settings.<name>`` is the plain value); ``lake stack up`` generates each one.
SECRET_NAMES = tuple(public_name(n) for n, f in Settings.model_fields.items() if f.annotation is SecretStr)


def defaults() -> dict[str, str]:
    """Every setting's default as text (``{host}`` refers to another setting), for ``.env.example``."""
    out: dict[str, str] = {}
    for name, field in Settings.model_fields.items():
        default = field.default
        out[public_name(name)] = default.get_secret_value() if isinstance(default, SecretStr) else str(default)
    return out


def check(s: Settings) -> None:
    """Raise :class:`SettingsError` naming the first variable that is out of range or clashes with another."""
    _check_ports(s)
    if not (LOCAL_MASTER.match(s.spark_master) or s.spark_master.startswith(("spark://", "k8s://"))
            or s.spark_master == "yarn"):
        raise SettingsError(
            f"LAKE_SPARK_MASTER={s.spark_master!r} is not a Spark master URL; "
            "use local[N], spark://host:7077, k8s://https://... or yarn"
        )
    if not s.s3_endpoint.startswith(("http://", "https://")):
        raise SettingsError(f"LAKE_S3_ENDPOINT={s.s3_endpoint!r} must start with http:// or https://")
    _check_streaming(s)
    _check_quality(s)
    _check_kafka(s)
    _check_cluster(s)
    if s.retention_warn_fraction > s.retention_fail_fraction:
        raise SettingsError(f"LAKE_RETENTION_WARN_FRACTION={s.retention_warn_fraction} is above "
                            f"LAKE_RETENTION_FAIL_FRACTION={s.retention_fail_fraction}; warn at or before failing")
    if s.spark_shuffle_partitions < 1:
        raise SettingsError("LAKE_SPARK_SHUFFLE_PARTITIONS must be >= 1")


def _check_ports(s: Settings) -> None:
    seen: dict[int, str] = {}
    for name in PORT_NAMES:
        port = getattr(s, name)
        if not 1 <= port <= 65535:
            raise SettingsError(f"{env_name(name)}={port} is not a TCP port (1-65535)")
        if port in seen:
            raise SettingsError(f"{env_name(name)} and {env_name(seen[port])} are both {port}; give each its own port")
        seen[port] = name


def _check_streaming(s: Settings) -> None:
    if s.stream_max_offsets_per_trigger < 1 or s.stream_trigger_seconds < 0:
        raise SettingsError("LAKE_STREAM_MAX_OFFSETS_PER_TRIGGER must be >= 1 and LAKE_STREAM_TRIGGER_SECONDS >= 0")
    if s.stream_max_records_per_task < 1:
        raise SettingsError(f"LAKE_STREAM_MAX_RECORDS_PER_TASK={s.stream_max_records_per_task} must be >= 1 (Kafka "
                            "records per Spark task of a CDC batch; 10000 is the default)")
    if s.cdc_task_merge_max_mb < 0:
        raise SettingsError(f"LAKE_CDC_TASK_MERGE_MAX_MB={s.cdc_task_merge_max_mb} must be >= 0 (MB of a silver CDC "
                            "table above which Spark's MERGE with deletion vectors applies it; 0: never; 128 is the "
                            "default)")
    if s.stream_compact_file_mb < 2:
        raise SettingsError(f"LAKE_STREAM_COMPACT_FILE_MB={s.stream_compact_file_mb} must be >= 2 (MB per file the "
                            "stream's OPTIMIZE writes; 128 is the default)")
    odd = [t for t in s.stream_java_options.split() if not t.startswith("-")]
    if odd:
        raise SettingsError(f"LAKE_STREAM_JAVA_OPTIONS={s.stream_java_options!r}: {odd[0]!r} is not a JVM option; give "
                            "space-separated options that each start with '-' (e.g. -XX:+UseG1GC), or empty for the "
                            "JVM's defaults")
    unknown_queries = sorted(set(s.stream_query_list) - set(STREAM_QUERIES))
    if unknown_queries or not s.stream_query_list:
        raise SettingsError(f"LAKE_STREAM_QUERIES={s.stream_queries!r}: give a comma-separated subset of "
                            f"{','.join(STREAM_QUERIES)} (unknown: {','.join(unknown_queries) or 'none given'})")
    if s.events_max_offsets_per_trigger < 1 or s.events_trigger_seconds < 0 or s.events_watermark_minutes < 1:
        raise SettingsError("LAKE_EVENTS_MAX_OFFSETS_PER_TRIGGER and LAKE_EVENTS_WATERMARK_MINUTES must be >= 1, "
                            "LAKE_EVENTS_TRIGGER_SECONDS >= 0")


def _check_quality(s: Settings) -> None:
    freshness_overrides(s.dq_freshness_tables)
    if s.dq_docs_keep < 1:
        raise SettingsError(f"LAKE_DQ_DOCS_KEEP={s.dq_docs_keep} must be >= 1 (validations kept per table in Data Docs)")


def _check_kafka(s: Settings) -> None:
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


def _check_cluster(s: Settings) -> None:
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
    worker_mb = megabytes("LAKE_SPARK_CLUSTER_WORKER_MEMORY", s.spark_cluster_worker_memory)
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
