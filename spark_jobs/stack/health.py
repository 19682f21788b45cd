"""Real health probes for the stack's services.

Each probe does what a client would: a SQL query, a Kafka produce/consume round
trip, a Connect REST call that lists the Debezium plugin, a bucket listing, a
Thrift call to the metastore, Airflow's health endpoint. A probe returns
``(ok, detail)`` and never raises.
"""

from __future__ import annotations

import socket
import struct
import time
import uuid
from typing import Any

import httpx

from spark_jobs import kafka_auth
from spark_jobs.settings import Settings

Probe = tuple[bool, str]


def port_open(host: str, port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def http_json(url: str, timeout: float = 5.0, headers: dict[str, str] | None = None) -> Any:
    """GET ``url`` and decode its JSON; ``httpx.HTTPError`` on a refused connection or a non-2xx answer."""
    response = httpx.get(url, timeout=timeout, headers=headers or {})
    response.raise_for_status()
    return response.json()


def postgres(settings: Settings) -> Probe:
    try:
        import psycopg2

        with psycopg2.connect(settings.pg_dsn(), connect_timeout=3) as conn, conn.cursor() as cur:
            cur.execute("SELECT current_setting('wal_level')")
            row = cur.fetchone()
        conn.close()
        wal = row[0] if row else "?"
        if wal != "logical":
            return False, f"wal_level is {wal}, expected logical"
        return True, "SELECT ok, wal_level=logical"
    except Exception as exc:  # noqa: BLE001 - a probe reports, never raises
        return False, f"{type(exc).__name__}: {exc}".strip()


def kafka(settings: Settings, timeout: float = 20.0) -> Probe:
    """Produce a unique message to ``_lake_health`` and read it back."""
    try:
        from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

        from spark_jobs.loadgen.producer import ensure_topic

        topic = "_lake_health"
        token = uuid.uuid4().hex.encode()
        conf = kafka_auth.client_conf(settings, "tools")
        ensure_topic(settings, topic, partitions=1, timeout=timeout)  # no auto-created topics on this broker
        producer = Producer({**conf, "acks": "all", "message.timeout.ms": int(timeout * 1000)})
        delivered: list[Any] = []
        producer.produce(topic, token, on_delivery=lambda err, msg: delivered.append((err, msg)))
        producer.flush(timeout)
        if not delivered:
            return False, f"no delivery report from {settings.kafka_bootstrap} within {timeout:.0f}s"
        err, msg = delivered[0]
        if err is not None:
            return False, f"produce failed: {err}"
        consumer = Consumer({**conf, "group.id": "_lake_health", "enable.auto.commit": False})
        try:
            consumer.assign([TopicPartition(topic, msg.partition(), msg.offset())])
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                got = consumer.poll(1.0)
                if got is None:
                    continue
                error = got.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        continue
                    return False, f"consume failed: {error}"
                if got.value() == token:
                    return True, "produce/consume round trip ok"
            return False, "produced message not read back"
        finally:
            consumer.close()
    except Exception as exc:  # noqa: BLE001
        return False, f"{type(exc).__name__}: {exc}"


DEBEZIUM_PG_CLASS = "io.debezium.connector.postgresql.PostgresConnector"


def connect(settings: Settings) -> Probe:
    try:
        plugins = http_json(f"{settings.connect_url}/connector-plugins", headers=kafka_auth.connect_rest_headers(settings))
        classes = {p.get("class") for p in plugins}
        if DEBEZIUM_PG_CLASS not in classes:
            return False, f"Connect is up but {DEBEZIUM_PG_CLASS} is not on its plugin path"
        return True, "REST ok, Debezium PostgreSQL plugin loaded"
    except Exception as exc:  # noqa: BLE001
        return False, f"{type(exc).__name__}: {exc}"


def status_parts(status: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """A connector's ``GET /connectors/<name>/status`` as ("connector" | "task N", its state entry) pairs."""
    parts = [("connector", status.get("connector") or {})]
    parts += [(f"task {t.get('id')}", t) for t in status.get("tasks") or []]
    return parts


def failure_line(name: str, what: str, part: dict[str, Any]) -> str:
    """``<name> <what> FAILED: <the trace's first line>``."""
    trace = (part.get("trace") or "no trace").strip().splitlines()
    return f"{name} {what} FAILED: {trace[0].rstrip('.') if trace else 'no trace'}"


def connector_failures(statuses: dict[str, Any]) -> list[str]:
    """Every FAILED connector or task in ``GET /connectors?expand=status``, with its trace's first line."""
    return [failure_line(name, what, part) for name, entry in sorted(statuses.items())
            for what, part in status_parts(entry.get("status") or {}) if part.get("state") == "FAILED"]


def connect_with_tasks(settings: Settings) -> Probe:
    """:func:`connect`, then the state of every registered connector and task: a FAILED one is unhealthy."""
    ok, detail = connect(settings)
    if not ok:
        return ok, detail
    try:
        statuses = http_json(f"{settings.connect_url}/connectors?expand=status",
                             headers=kafka_auth.connect_rest_headers(settings))
    except Exception as exc:  # noqa: BLE001
        return False, f"GET /connectors?expand=status failed: {type(exc).__name__}: {exc}"
    failed = connector_failures(statuses)
    if failed:
        names = sorted({f.split(" ", 1)[0] for f in failed})
        curl = kafka_auth.connect_curl(settings)
        restart = " and ".join(f"{curl} -X POST '{settings.connect_url}/connectors/{n}/restart?includeTasks=true"
                               "&onlyFailed=true'" for n in names)
        return False, ("; ".join(failed) + f". Full trace: GET {settings.connect_url}/connectors/{names[0]}/status; "
                       f"fix the cause, then restart: {restart}")
    states = [f"{n}: {(e.get('status') or {}).get('connector', {}).get('state', '?')}" for n, e in sorted(statuses.items())]
    return True, f"{detail}; connectors {', '.join(states) or 'none registered'}"


def s3_client(settings: Settings, access_key: str | None = None, secret_key: str | None = None) -> Any:
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=settings.s3_endpoint,
        aws_access_key_id=access_key or settings.s3_access_key,
        aws_secret_access_key=secret_key or settings.s3_secret_key,
        region_name=settings.s3_region,
        config=Config(
            s3={"addressing_style": "path"},
            retries={"max_attempts": 2},
            connect_timeout=3,
            read_timeout=10,
            # Third-party S3 stores reject the SDK's newer default checksums.
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        ),
    )


def minio(settings: Settings) -> Probe:
    try:
        s3_client(settings).list_objects_v2(Bucket=settings.s3_bucket, MaxKeys=1)
        return True, f"listed bucket {settings.s3_bucket} with the lake's scoped keys"
    except Exception as exc:  # noqa: BLE001
        return False, f"{type(exc).__name__}: {exc}"


def _thrift_string(value: str) -> bytes:
    raw = value.encode()
    return struct.pack("!i", len(raw)) + raw


def metastore_databases(host: str, port: int, timeout: float = 10.0) -> list[str]:
    """Call ``ThriftHiveMetastore.get_all_databases`` (binary protocol, unframed)."""
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(struct.pack("!I", 0x80010001) + _thrift_string("get_all_databases")
                     + struct.pack("!i", 1) + b"\x00")
        reader = sock.makefile("rb")

        def read(n: int) -> bytes:
            data = reader.read(n)
            if len(data) != n:
                raise ConnectionError("metastore closed the connection mid-reply")
            return data

        (version,) = struct.unpack("!I", read(4))
        if version & 0xFFFF0000 != 0x80010000:
            raise ConnectionError(f"not a Thrift binary reply (0x{version:08x})")
        name_len = struct.unpack("!i", read(4))[0]
        read(name_len)
        read(4)  # seqid
        if version & 0xFF == 3:
            raise ConnectionError("metastore answered with a Thrift application exception")
        ftype, fid = struct.unpack("!bh", read(3))
        if ftype != 15 or fid != 0:
            raise ConnectionError(f"metastore answered with field {fid} (type {ftype}), not a list")
        _etype, size = struct.unpack("!bi", read(5))
        names = []
        for _ in range(size):
            n = struct.unpack("!i", read(4))[0]
            names.append(read(n).decode())
        return names


def thrift(settings: Settings) -> Probe:
    # HiveServer2 opens its port only once the session catalog is initialised;
    # a real query runs in tests/integration (beeline) and in `lake sql`.
    if port_open(settings.host, settings.thrift_port):
        return True, f"HiveServer2 listening on {settings.host}:{settings.thrift_port}"
    return False, f"nothing listening on {settings.host}:{settings.thrift_port}"


def spark_connect(settings: Settings) -> Probe:
    # The gRPC port opens once the server's SparkSession (catalog, jars) is up; `lake gold` and the
    # gold DAG's tasks run real plans through it (tests/integration/test_gold.py).
    if port_open(settings.host, settings.spark_connect_port):
        return True, f"Spark Connect listening on {settings.host}:{settings.spark_connect_port}"
    return False, f"nothing listening on {settings.host}:{settings.spark_connect_port}"


def spark_cluster(settings: Settings) -> Probe:
    """The standalone master answers and every worker registered ALIVE."""
    url = f"http://{settings.host}:{settings.spark_cluster_webui_port}/json/"
    try:
        state = http_json(url)
    except (httpx.HTTPError, OSError, ValueError) as exc:
        return False, f"master web UI {url} not answering ({exc})"
    alive = [w for w in state.get("workers", []) if w.get("state") == "ALIVE"]
    if len(alive) < settings.spark_cluster_workers:
        return False, f"{len(alive)} of {settings.spark_cluster_workers} worker(s) ALIVE at {state.get('url')}"
    cores = sum(int(w.get("cores", 0)) for w in alive)
    return True, f"{state.get('url')}: {len(alive)} worker(s), {cores} cores, {len(state.get('activeapps', []))} app(s)"


def dq_docs(settings: Settings) -> Probe:
    url = f"http://{settings.host}:{settings.dq_docs_port}/index.html"
    try:
        response = httpx.get(url, timeout=5, auth=(settings.dq_docs_user, settings.dq_docs_password))
        response.raise_for_status()
        body = response.text[:200_000]
    except httpx.HTTPError as exc:
        return False, f"{type(exc).__name__}: {exc}"
    return ("<html" in body.lower() or "<!doctype" in body.lower()), f"GET {url} -> {len(body)} bytes of HTML"


def airflow(settings: Settings) -> Probe:
    try:
        body = http_json(f"{settings.airflow_url}/api/v2/monitor/health")
    except (httpx.HTTPError, ValueError) as exc:
        return False, f"{type(exc).__name__}: {exc}"
    bad = [k for k in ("metadatabase", "scheduler", "triggerer", "dag_processor")
           if (body.get(k) or {}).get("status") != "healthy"]
    if bad:
        return False, "unhealthy: " + ", ".join(bad)
    return True, "metadatabase, scheduler, triggerer, dag_processor healthy"
