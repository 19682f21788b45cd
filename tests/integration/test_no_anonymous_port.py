"""No way in without a credential (issue 32, items 2-4): every port the stack's processes listen on refuses an
unauthenticated client or shows it nothing, and an analyst login (Thrift JDBC, Spark Connect) can neither read
the state dir's files nor load code."""

from __future__ import annotations

import socket
import struct
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import pytest

from spark_jobs.settings import Settings
from spark_jobs.stack import health
from tests.integration.lakehelpers import beeline
from tests.integration.test_hardening import Listener, _listeners, streaming  # noqa: F401 (fixture)

pytestmark = pytest.mark.integration

T = TypeVar("T")

#: Ports that speak Spark's RPC (netty transport): with spark.authenticate they expect an auth challenge first.
SPARK_RPC_PORTS = ("thrift_driver_port", "thrift_block_manager_port", "spark_connect_driver_port",
                   "spark_connect_block_manager_port", "stream_driver_port", "stream_block_manager_port",
                   "spark_cluster_master_port")


@pytest.fixture(scope="module")
def listeners(streaming: Settings) -> Iterator[list[Listener]]:  # noqa: F811
    found = _listeners(streaming)
    assert found, "no listener found: the scan proves nothing"
    yield found


def _spark_rpc_request(body: bytes) -> bytes:
    """A Spark transport frame holding an RpcRequest (type 3) without the auth handshake that must come first."""
    request_id = 1
    payload = struct.pack("!bqi", 3, request_id, len(body)) + body
    return struct.pack("!q", 8 + len(payload)) + payload


def _answers_unauthenticated_rpc(host: str, port: int) -> bool:
    """True when the port handles an RPC sent without Spark's auth handshake. A server with spark.authenticate
    either closes the connection or fails the request in its auth challenge (an RpcFailure, type 5, saying it
    expected a SASL/auth message) before any handler sees it; a server without it hands the request to its RPC
    handler, whose reply (a response, or a failure from decoding the request) names no auth challenge."""
    with socket.create_connection((host, port), timeout=10) as sock:
        sock.sendall(_spark_rpc_request(b"\x00" * 16))
        reply = b""
        try:
            while len(reply) < 4096:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                reply += chunk
        except (ConnectionResetError, TimeoutError):
            pass
    if not reply:
        return False
    refused_in_auth = reply[8:9] == b"\x05" and (b"Expected SaslMessage" in reply or b"AuthMessage" in reply
                                                  or b"doAuthChallenge" in reply)
    return not refused_in_auth


def _each_listener(probe: Callable[[Listener], T], listeners: list[Listener]) -> list[tuple[Listener, T]]:
    """``probe`` of every listener, all at once: a port that holds the connection silently costs its full timeout
    (10 s), and one after the other they took 60-70 s of the suite."""
    with ThreadPoolExecutor(max_workers=max(1, len(listeners))) as pool:
        return list(zip(listeners, pool.map(probe, listeners), strict=True))


def _catalog_answer(listener: Listener) -> list[str] | None:
    try:
        return health.metastore_databases(listener.address, listener.port, timeout=10)
    except Exception:
        return None


def test_no_listener_serves_the_catalog_to_a_raw_thrift_client(listeners: list[Listener]) -> None:
    # The Thrift get_all_databases that listed every database on the old metastore port (issue 32, item 2),
    # sent to every port of the stack's process trees.
    answered = [f"{listener}: {names}" for listener, names in _each_listener(_catalog_answer, listeners)
                if names is not None]
    assert answered == [], f"answered get_all_databases without a login: {answered}"


def test_spark_rpc_ports_refuse_a_client_without_the_secret(streaming: Settings,  # noqa: F811
                                                             listeners: list[Listener]) -> None:
    ports = {getattr(streaming, name) for name in SPARK_RPC_PORTS}
    live = [listener for listener in listeners if listener.port in ports]
    assert {"thrift", "spark-connect", "stream"} <= {listener.program for listener in live}, live
    answered = [str(listener) for listener, yes in _each_listener(
        lambda listener: _answers_unauthenticated_rpc(listener.address, listener.port), live) if yes]
    assert answered == [], f"answered a Spark RPC sent without the spark.authenticate handshake: {answered}"


def test_thrift_login_cannot_read_state_dir_files(stack: Settings) -> None:
    conf = stack.conf_dir / "spark" / "spark-defaults.conf"
    for query in (f"SELECT * FROM text.`file://{conf}`", f"SELECT * FROM text.`{stack.state_dir / 'secrets'}`",
                  f"SELECT * FROM csv.`{conf}`", "SET spark.hadoop.fs.s3a.secret.key",
                  "SELECT reflect('java.lang.System', 'getenv', 'LAKE_THRIFT_USERS_FILE')"):
        result = beeline(stack, query)
        assert result.returncode != 0, f"{query} ran: {result.stdout[-500:]}"
        assert "Lakestream" in result.stdout + result.stderr, result.stderr[-2000:]
        assert stack.s3_secret_key not in result.stdout + result.stderr


def test_thrift_login_cannot_load_code(stack: Settings) -> None:
    name = f"f_{uuid.uuid4().hex[:8]}"
    jar = stack.state_dir / "java-classes"  # any path: the command is refused before it is looked at
    for query in (f"ADD JAR {jar}/x.jar", f"CREATE TEMPORARY FUNCTION {name} AS 'LakeThriftAuth'",
                  f"CREATE FUNCTION default.{name} AS 'x.Y' USING JAR 'file://{jar}/x.jar'", "ADD FILE /etc/hostname",
                  f"INSERT OVERWRITE DIRECTORY 'file://{stack.state_dir}/x' USING csv SELECT 1"):
        result = beeline(stack, query)
        assert result.returncode != 0 and "Lakestream" in result.stdout + result.stderr, (query, result.stderr[-2000:])


def test_thrift_login_still_queries_the_lake(stack: Settings) -> None:
    result = beeline(stack, "SHOW DATABASES")
    assert result.returncode == 0 and "default" in result.stdout, result.stderr[-2000:]


def test_spark_connect_token_cannot_read_files_or_load_code(stack: Settings) -> None:
    from pyspark.sql.functions import udf

    from spark_jobs.session import connect_session

    spark = connect_session(stack)
    conf = stack.conf_dir / "spark" / "spark-defaults.conf"
    with pytest.raises(Exception, match="Lakestream"):
        spark.read.text(str(conf)).collect()
    with pytest.raises(Exception, match="Lakestream"):
        spark.range(1).select(udf(lambda _: 1)("id")).collect()
    with pytest.raises(Exception, match=r"Lakestream|PERMISSION_DENIED"):
        spark.conf.get("spark.hadoop.fs.s3a.secret.key")
    with pytest.raises(Exception, match=r"Lakestream|PERMISSION_DENIED"):
        spark.addArtifacts(str(conf), file=True)
    assert spark.sql("SELECT 1 AS one").collect()[0]["one"] == 1
