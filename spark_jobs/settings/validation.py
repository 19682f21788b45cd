"""What makes a set of ``LAKE_*`` values usable together, and the errors that say which variable to fix."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from spark_jobs.settings.model import Settings


class SettingsError(ValueError):
    """A ``LAKE_*`` variable has a value we cannot use."""


def env_name(field_name: str) -> str:
    return "LAKE_" + field_name.upper()


#: Spark applications a stack runs on its cluster at once: the streaming app, Spark Connect, Thrift, and one
#: `lake` job (reconcile, bench, sql). A standalone master gives cores and memory first come first served, so the
#: cluster needs room for all of them or the last one waits forever.
CLUSTER_APPS = 4
#: Memory of one executor (Spark's default ``spark.executor.memory``), in MB; an application spreads over the
#: workers, so each worker may hold one executor of every application.
EXECUTOR_MEMORY_MB = 1024

#: The streaming app's queries (``LAKE_STREAM_QUERIES``).
STREAM_QUERIES = ("cdc", "events")

#: Every TCP port the stack listens on, by setting name: each listener binds ``host`` on one of these.
PORT_NAMES = ("pg_port", "kafka_port", "kafka_controller_port", "connect_port", "minio_port", "minio_console_port",
              "thrift_port", "thrift_driver_port", "thrift_block_manager_port",
              "spark_connect_port", "spark_connect_driver_port", "spark_connect_block_manager_port",
              "stream_driver_port", "stream_block_manager_port", "dq_docs_port", "airflow_port",
              "airflow_scheduler_health_port", "spark_cluster_master_port", "spark_cluster_webui_port",
              "spark_cluster_worker_port")

_LOCAL_MASTER = re.compile(r"^local(\[(\d+|\*)(,\d+)?\])?$")


def megabytes(name: str, raw: str) -> int:
    """A JVM-style size (``512m``, ``6g``) in MB."""
    m = re.fullmatch(r"(\d+)([mMgG])", raw.strip())
    if not m:
        raise SettingsError(f"{name}={raw!r} is not a size like 512m or 6g; fix it in the environment or .env")
    return int(m.group(1)) * (1024 if m.group(2) in "gG" else 1)


def freshness_overrides(raw: str) -> dict[str, int]:
    """``LAKE_DQ_FRESHNESS_TABLES`` (``silver.orders=600,hot.funnel_15m=120``) as table -> seconds."""
    out: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in raw.split(","))):
        table, sep, seconds = item.partition("=")
        if not sep or not re.fullmatch(r"[a-z][a-z0-9_]*\.[a-z][a-z0-9_]*", table.strip()) \
                or not seconds.strip().isdigit() or int(seconds) < 1:
            raise SettingsError(f"LAKE_DQ_FRESHNESS_TABLES: {item!r} is not <db>.<table>=<seconds >= 1> "
                                "(e.g. silver.orders=600,hot.funnel_15m=120)")
        out[table.strip()] = int(seconds)
    return out


def check(s: Settings) -> None:
    """Raise :class:`SettingsError` naming the first variable that is out of range or clashes with another."""
    _check_ports(s)
    if not (_LOCAL_MASTER.match(s.spark_master) or s.spark_master.startswith(("spark://", "k8s://"))
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
    unknown_queries = sorted(set(s.stream_query_list) - set(STREAM_QUERIES))
    if unknown_queries or not s.stream_query_list:
        raise SettingsError(f"LAKE_STREAM_QUERIES={s.stream_queries!r}: give a comma-separated subset of "
                            f"{','.join(STREAM_QUERIES)} (unknown: {','.join(unknown_queries) or 'none given'})")
    if (s.events_max_offsets_per_trigger < 1 or s.events_trigger_seconds < 0 or s.events_archive_trigger_seconds < 0
            or s.events_watermark_minutes < 1):
        raise SettingsError("LAKE_EVENTS_MAX_OFFSETS_PER_TRIGGER and LAKE_EVENTS_WATERMARK_MINUTES must be >= 1, "
                            "LAKE_EVENTS_TRIGGER_SECONDS and LAKE_EVENTS_ARCHIVE_TRIGGER_SECONDS >= 0")


def _check_quality(s: Settings) -> None:
    freshness_overrides(s.dq_freshness_tables)
    if s.dq_docs_keep < 1:
        raise SettingsError(f"LAKE_DQ_DOCS_KEEP={s.dq_docs_keep} must be >= 1 (validations kept per table in Data Docs)")
    if s.dq_freshness_silver_seconds < 1 or s.dq_freshness_hot_seconds < 1:
        raise SettingsError(f"LAKE_DQ_FRESHNESS_SILVER_SECONDS={s.dq_freshness_silver_seconds} and "
                            f"LAKE_DQ_FRESHNESS_HOT_SECONDS={s.dq_freshness_hot_seconds} must both be >= 1 (seconds)")


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
