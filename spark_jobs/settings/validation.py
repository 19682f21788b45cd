"""The limits a set of ``LAKE_*`` values is checked against (by :func:`spark_jobs.settings.model.check`), and the
errors that say which variable to fix."""

from __future__ import annotations

import re


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

LOCAL_MASTER = re.compile(r"^local(\[(\d+|\*)(,\d+)?\])?$")


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
