"""The only place a SparkSession is built.

:func:`spark_conf` is the single source of Spark configuration. It is written
to ``<state>/conf/spark/spark-defaults.conf`` (mode 0600, the ``SPARK_CONF_DIR``
of every Spark process: ``spark-submit`` from Airflow, the Thrift and Spark
Connect servers, the stream, ``lake sql``) so all see the same catalog, lake
and jars. The in-process builder passes only the non-secret part: pyspark
turns builder options into ``spark-submit --conf`` arguments, which any local
user can read in ``/proc/<pid>/cmdline``; the S3 keys reach the JVM from the
private file alone.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spark_jobs.files import write_atomic
from spark_jobs.jars import spark_extra_jars
from spark_jobs.settings import Settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


#: Spark properties whose values are secrets: only in the 0600 ``spark-defaults.conf``, never on a command line.
#: The streaming app's program name under the stack's supervisor (``lake stream start|stop``).
STREAM_PROGRAM = "stream"

SECRET_SPARK_KEYS = frozenset({"spark.hadoop.fs.s3a.access.key", "spark.hadoop.fs.s3a.secret.key",
                               "spark.authenticate.secret", "spark.hadoop.javax.jdo.option.ConnectionPassword"})


#: Delta Lake's extension and catalog, and how its snapshots are read (every Spark process, the unit tests' too).
DELTA_CONF: dict[str, str] = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    "spark.databricks.delta.schema.autoMerge.enabled": "false",
    # Snapshot metadata from the version checksum (.crc) instead of a Spark job over the log.
    # Every idempotent write (txnAppId/txnVersion) reads the table's SetTransactions and every
    # MERGE/read lists its files; by default each is a state reconstruction job over the last
    # checkpoint + JSON commits, re-run after each commit (delta-io/delta#4708, PR #7670
    # describes the same per-micro-batch cost). With the set transactions and, for tables up to
    # allFilesInCrc.thresholdNumFiles files, the file list kept in the .crc (computed
    # incrementally at commit), those reads need no job (figures: docs/benchmarks.md, "Figures moved
    # out of code comments").
    # The histogram aggregation is skipped: delta-io/delta#6854 (a redundant aggregate per snapshot).
    "spark.databricks.delta.setTransactionsInCrc.writeOnCommit": "true",
    "spark.databricks.delta.allFilesInCrc.enabled": "true",
    "spark.databricks.delta.allFilesInCrc.verificationMode.enabled": "false",
    "spark.databricks.delta.fileSizeHistogramMetrics.enabled": "false",
    # State reconstruction (when it still runs) of tables this size needs one partition, not 50.
    "spark.databricks.delta.snapshotPartitions": "1",
}


#: Compiled code kept for reuse (a static conf: set before the session starts). With Spark's default cache of
#: 100 entries the queries of one driver evicted each other's generated classes and recompiled them every batch
#: (docs/benchmarks.md, "Generated code recompiled every batch").
CODEGEN_CONF: dict[str, str] = {"spark.sql.codegen.cache.maxEntries": "2000"}

#: JVM options of a driver that lives for one command (``lake job``, ``lake reconcile``, ``lake sql --local``,
#: ``lake dq run``, the benches' readers): C2's compiles never pay back in a JVM that runs a few small jobs, and
#: the serial collector spares the parallel collector's threads on a small machine (figures: docs/benchmarks.md,
#: "make test duration"). The long-running drivers (stream, Spark Connect, Thrift) keep C2: for the
#: stream, C1 alone was measured slower (docs/benchmarks.md, "The stream's JIT compilers").
#: With C1 alone the JVM reserves 48 MB for compiled code instead of 240 MB: Spark's generated classes filled it
#: within 35 s of a ``lake reconcile events --all-windows`` (``CodeCache is full. Compiler has been disabled``, the
#: rest of the command interpreted), so the size is given back. The JVM's own warnings go to stderr, not stdout
#: (its default), where they broke the JSON of ``--json`` commands.
SHORT_LIVED_JVM_OPTIONS = ("-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:ReservedCodeCacheSize=240m "
                           "-Xlog:disable -Xlog:all=warning:stderr")

#: Delta's auto compaction off for one process (a session conf overrides the tables' property,
#: ``contracts.tables.AUTO_COMPACT``): for writers that lay out their files themselves (the stream compacts on a
#: schedule, a replay writes each shadow in one pass).
AUTO_COMPACT_OFF: dict[str, str] = {"spark.databricks.delta.autoCompact.enabled": "false"}


def spark_conf(settings: Settings, *, with_jars: bool = True) -> dict[str, str]:
    """Spark properties for a Lakestream process (secrets included: keep private)."""
    conf: dict[str, str] = {
        "spark.master": settings.spark_master,
        "spark.driver.memory": settings.spark_driver_memory,
        "spark.sql.shuffle.partitions": str(settings.spark_shuffle_partitions),
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        # Python workers (UDFs, mapInArrow) talk to the JVM over a Unix socket, not a TCP listener on
        # 127.0.0.1 with a random port (which ignores LAKE_HOST). Files under java.io.tmpdir, umask 077.
        "spark.python.unix.domain.socket.enabled": "true",
        "spark.sql.session.timeZone": "UTC",
        # Data source options printed in plans and logs are redacted where the name matches: the Kafka source's
        # kafka.sasl.jaas.config holds the stream's password (Spark's default matches only "url").
        "spark.sql.redaction.options.regex": "(?i)url|jaas|password",
        **DELTA_CONF,
        **CODEGEN_CONF,
        "spark.sql.catalogImplementation": "hive",
        **catalog_conf(settings),
        "spark.sql.warehouse.dir": settings.warehouse_uri,
        # Spark's RPC (drivers, executors, a standalone master and workers) and block transfers need the
        # installation's shared secret; without it a local user could fetch blocks (the broadcast Hadoop conf holds
        # the S3 keys) or register an application with the cluster. A standalone worker hands the secret to its
        # executors in their environment (Spark's own _SPARK_AUTH_SECRET), never on a command line.
        "spark.authenticate": "true",
        "spark.authenticate.secret": settings.spark_auth_secret,
        "spark.network.crypto.enabled": str(settings.spark_network_crypto).lower(),
        # S3A against MinIO or S3 with the lake's scoped (non-root) keys.
        "spark.hadoop.fs.s3a.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        "spark.hadoop.fs.s3a.endpoint": settings.s3_endpoint,
        "spark.hadoop.fs.s3a.endpoint.region": settings.s3_region,
        "spark.hadoop.fs.s3a.access.key": settings.s3_access_key,
        "spark.hadoop.fs.s3a.secret.key": settings.s3_secret_key,
        "spark.hadoop.fs.s3a.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.connection.ssl.enabled": str(settings.s3_endpoint.startswith("https")).lower(),
        "spark.hadoop.fs.s3a.fast.upload": "true",
        # Delta on S3 without a DynamoDB log store: single writer per table (DESIGN.md).
        "spark.delta.logStore.s3a.impl": "io.delta.storage.S3SingleDriverLogStore",
    }
    if on_this_machine(settings):
        # Keep a local driver (or one of the stack's own cluster) on loopback like every other service.
        conf["spark.driver.bindAddress"] = settings.host
        conf["spark.driver.host"] = settings.host
    if settings.spark_master.startswith("spark://"):
        # A standalone application takes every free core by default: the stream, Spark Connect, Thrift and the
        # jobs share the cluster, so each takes at most this many.
        conf["spark.cores.max"] = str(settings.spark_cores_max)
    if with_jars:
        jars = [str(p) for p in spark_extra_jars(settings)]
        conf["spark.jars"] = ",".join(jars)
        # The driver also needs them on its system classpath: the S3A filesystem
        # and the JDBC driver are loaded by Hadoop/DataNucleus, not the Spark
        # class loader. pyspark's own jars win (see jars.select_extra_jars).
        conf["spark.driver.extraClassPath"] = ":".join(jars)
        conf["spark.executor.extraClassPath"] = ":".join(jars)
    return conf


def catalog_conf(settings: Settings) -> dict[str, str]:
    """How a Spark process reaches the shared catalog.

    By default no metastore service: each process runs Hive's metastore code (ObjectStore) in its own JVM against
    PostgreSQL's metastore database, with that database's password from the 0600 spark-defaults.conf. Hive 2.3's
    Thrift service cannot authenticate its clients without Kerberos, and anyone reaching its port could drop a
    database with the lake's S3 keys; a database login is a check PostgreSQL already makes. Several JVMs on one
    metastore database is Hive's "local metastore" setup (each HiveServer2 of a farm has its own ObjectStore);
    DataNucleus' level-2 cache stays off (Hive's default), so none serves another's stale objects. The schema is
    created once by ``lake stack up`` (infra/metastore/LakeMetastoreInit.java) before any Spark process starts.
    ``LAKE_METASTORE_URI`` names an external (authenticated) metastore service instead.
    """
    if settings.metastore_uri:
        return {"spark.hadoop.hive.metastore.uris": settings.metastore_uri}
    return {f"spark.hadoop.{k}": v for k, v in metastore_db_conf(settings).items()}


def metastore_db_conf(settings: Settings) -> dict[str, str]:
    """Hive's JDO/DataNucleus properties for the metastore database (the password included: keep private)."""
    return {
        "javax.jdo.option.ConnectionURL":
            f"jdbc:postgresql://{settings.pg_host}:{settings.pg_port}/{settings.metastore_db}",
        "javax.jdo.option.ConnectionDriverName": "org.postgresql.Driver",
        "javax.jdo.option.ConnectionUserName": settings.pg_metastore_user,
        "javax.jdo.option.ConnectionPassword": settings.pg_metastore_password,
        "hive.metastore.uris": "",
        # Tables the init missed (a newer Hive) are still created on first use; constraints never (they
        # deadlocked the first CREATE TABLE in earlier trials: shared/VERSIONS.md, pitfall 1).
        "datanucleus.schema.autoCreateTables": "true",
        "datanucleus.schema.autoCreateColumns": "true",
        "datanucleus.schema.autoCreateConstraints": "false",
        "datanucleus.fixedDatastore": "false",
        "hive.metastore.schema.verification": "false",
        "hive.metastore.try.direct.sql": "true",
        "hive.metastore.event.db.notification.api.auth": "false",
    }


def on_this_machine(settings: Settings) -> bool:
    """Whether Spark's executors run on this machine: ``local[...]`` or the stack's own cluster."""
    return settings.spark_master.startswith("local") or settings.spark_cluster_workers > 0


def public_spark_conf(settings: Settings) -> dict[str, str]:
    """:func:`spark_conf` without its secrets: what may appear on a command line."""
    return {k: v for k, v in spark_conf(settings).items() if k not in SECRET_SPARK_KEYS}


def spark_conf_dir(settings: Settings) -> Path:
    """``SPARK_CONF_DIR`` of every Lakestream Spark process."""
    return settings.conf_dir / "spark"


def spark_defaults_text(settings: Settings) -> str:
    lines = ["# Generated from spark_jobs.session.spark_conf (lake stack up, every session). Holds secrets: mode 0600."]
    for key, value in sorted(spark_conf(settings).items()):
        lines.append(f"{key} {value}")
    return "\n".join(lines) + "\n"


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` readable by its owner only (0600; folders 0700), atomically.

    Readers (a JVM starting while another process refreshes the file) see the old or the new file, never a
    truncated one.
    """
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    write_atomic(path, text, private=True)


def write_spark_defaults(settings: Settings) -> Path:
    """Write the private ``spark-defaults.conf`` for the current settings; returns its folder (``SPARK_CONF_DIR``)."""
    conf_dir = spark_conf_dir(settings)
    target = conf_dir / "spark-defaults.conf"
    text = spark_defaults_text(settings)
    if not target.is_file() or target.read_text(encoding="utf-8") != text or target.stat().st_mode & 0o077:
        write_private(target, text)
    return conf_dir


def build_session(settings: Settings, app_name: str, extra: dict[str, str] | None = None, *,
                  short_lived: bool = False) -> SparkSession:
    """Build (or get) the SparkSession for ``app_name`` with the lake's configuration.

    ``short_lived``: the driver runs one command and exits (:data:`SHORT_LIVED_JVM_OPTIONS`).

    Secrets (:data:`SECRET_SPARK_KEYS`) reach the JVM only through the 0600 ``spark-defaults.conf`` in the
    lake's ``SPARK_CONF_DIR``, which this refreshes and points the JVM at.
    """
    from pyspark.sql import SparkSession

    leaked = SECRET_SPARK_KEYS & set(extra or {})
    if leaked:
        raise ValueError(f"build_session(extra=...) got secret Spark properties {sorted(leaked)}: they would be "
                         "on the JVM's command line; set them through spark_conf (the private spark-defaults.conf)")
    # The JVM reads its defaults (S3 keys included) and log configuration from here, not from argv.
    os.environ["SPARK_CONF_DIR"] = str(write_spark_defaults(settings))
    if on_this_machine(settings):
        os.environ.setdefault("SPARK_LOCAL_IP", settings.host)
    # Python workers (mapInArrow in the events query and `lake reconcile`) run this interpreter, so they have
    # the project's packages; pyspark takes the executors' Python from here. A cluster's workers need the same
    # venv at the same path.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    jvm = {"spark.driver.extraJavaOptions": SHORT_LIVED_JVM_OPTIONS} if short_lived else {}
    for key, value in {**public_spark_conf(settings), **jvm, **(extra or {})}.items():
        builder = builder.config(key, value)
    builder = builder.enableHiveSupport()
    return builder.getOrCreate()


def connect_session(settings: Settings) -> SparkSession:
    """A Spark Connect session on the stack's long-running Spark server (``spark-connect`` service).

    Used by Airflow tasks and ``lake gold``: plans go to one warm driver that already holds the lake's
    configuration, so a task costs seconds instead of a JVM start.
    """
    from typing import cast

    from pyspark.sql import SparkSession
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    # What pyspark's own builder.remote() sets: pyspark.sql.functions and friends dispatch on it to their Connect
    # implementations (without it F.col(...) takes the classic path and fails on the missing SparkContext).
    os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"
    return cast(SparkSession, ConnectSession.builder.channelBuilder(
        _loopback_channel_builder(settings.spark_connect_url)).getOrCreate())


def is_loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _loopback_channel_builder(url: str) -> Any:
    """pyspark's channel builder, except that a token goes over gRPC local credentials to any loopback address.

    pyspark sends a bearer token without TLS only to the literal host ``localhost``; the stack's server listens
    on ``LAKE_HOST``, which may be another loopback address (127.0.0.2, ...). gRPC's local credentials check the
    peer is on this machine, so the token never leaves it. Any other host still needs TLS (pyspark's rule).
    """
    import grpc  # type: ignore[import-untyped]
    from pyspark.sql.connect.client.core import DefaultChannelBuilder

    class LoopbackChannelBuilder(DefaultChannelBuilder):
        def toChannel(self) -> Any:
            if self.secure and not self.use_ssl and is_loopback(self.host):
                creds = grpc.local_channel_credentials()
                if self.token is not None:
                    creds = grpc.composite_channel_credentials(creds, grpc.access_token_call_credentials(self.token))
                return self._secure_channel(self.endpoint, creds)
            return super().toChannel()

    return LoopbackChannelBuilder(url)


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
    if environ.get("SUPERVISOR_PROCESS_NAME") != STREAM_PROGRAM:
        return {}
    return driver_ports_conf(settings.stream_driver_port, settings.stream_block_manager_port)
