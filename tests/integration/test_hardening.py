"""Hardening on the real stack, checked as another local user would look at it (issue 20, items 1-3).

1. Every listener of every supervised process tree (the stream included) is on ``LAKE_HOST`` and a port
   from the settings.
2. No process on the machine shows a secret of this state dir on its command line: the stack, the stream
   and a ``lake sql --local`` run (its own Spark JVM), while they run.
3. Nothing under the state dir is readable by group or others.

Run them against a stack on another address to see what ignores ``LAKE_HOST``, e.g. ``LAKE_HOST=127.0.0.2``
with every ``LAKE_*_PORT`` shifted and its own ``LAKE_STATE_DIR``.
"""

from __future__ import annotations

import ipaddress
import os
import stat
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from spark_jobs.settings import PORT_NAMES, SECRET_NAMES, Settings, env_name
from spark_jobs.stack import supervisor
from tests.integration.lakehelpers import LAKE, start_streaming, wait_until

#: pyspark's py4j gateway (in the driver's JVM) and callback server (in the Python driver) listen on
#: 127.0.0.1 with a random port, authenticated by a per-process secret; Spark 4.1 hard-codes the address
#: (Py4JServer: InetAddress.getLoopbackAddress(), port 0) and has no setting for either.
PY4J_LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class Listener:
    program: str
    pid: int
    process: str
    address: str
    port: int

    def __str__(self) -> str:
        return f"{self.program}: pid {self.pid} ({self.process}) listens on {self.address}:{self.port}"


def _normal(address: str) -> str:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return str(ip)


def _tree(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _supervised(settings: Settings) -> dict[str, list[psutil.Process]]:
    """Every running supervised program -> its process tree."""
    trees = {}
    for info in supervisor.rpc(settings).getAllProcessInfo():
        if info["statename"] == "RUNNING" and info["pid"]:
            trees[info["name"]] = _tree(int(info["pid"]))
    return trees


def _listeners(settings: Settings) -> list[Listener]:
    found = []
    for program, procs in _supervised(settings).items():
        for proc in procs:
            try:
                conns = proc.net_connections(kind="inet")
                name = proc.name()
            except (psutil.NoSuchProcess, psutil.ZombieProcess):
                continue
            for conn in conns:
                if conn.status == psutil.CONN_LISTEN:
                    found.append(Listener(program, proc.pid, name, _normal(conn.laddr.ip), conn.laddr.port))
    return found


def _allowed(settings: Settings, listener: Listener, ports: set[int]) -> bool:
    host = _normal(settings.host) if settings.host != "localhost" else "127.0.0.1"
    if listener.address == host and listener.port in ports:
        return True
    loopback = ipaddress.ip_address(listener.address).is_loopback
    if listener.program == "minio" and listener.port == settings.minio_port and loopback:
        # MinIO also serves its API port on every loopback address for its console, whatever --address says
        # (cmd/server-main.go getServerListenAddrs): not reachable from another machine, and no setting.
        return True
    if listener.program == "stream" and listener.address == PY4J_LOOPBACK and listener.port not in ports:
        return True  # PY4J_LOOPBACK above
    return False


@pytest.fixture(scope="module")
def streaming(stack: Settings) -> Iterator[Settings]:
    """The stack with the streaming app running its queries (their listeners and command lines count)."""
    start_streaming()
    log = supervisor.log_path(stack, "stream")

    def queries_running() -> bool:
        info = supervisor.program_info(stack, "stream") or {}
        assert info.get("statename") not in ("FATAL", "EXITED", "BACKOFF"), f"stream is {info}; see {log}"
        text = log.read_text(errors="replace")[-200_000:] if log.exists() else ""
        return info.get("statename") == "RUNNING" and text.count("lake stream: query ") >= len(
            stack.stream_query_list)

    wait_until(queries_running, f"the stream's queries to run (log {log})", 300, every=2)
    yield stack


def test_every_listener_is_on_lake_host_and_a_port_from_the_settings(streaming: Settings) -> None:
    settings = streaming
    ports = {getattr(settings, name) for name in PORT_NAMES}
    listeners = _listeners(settings)
    programs = {listener.program for listener in listeners}
    # The check must see the services it is about, or it proves nothing.
    for expected in ("postgres", "minio", "kafka", "connect", "thrift", "spark-connect",
                     "airflow-api-server", "airflow-scheduler", "stream"):
        assert expected in programs, f"no listener found for {expected}: {sorted(programs)}"
    bad = [listener for listener in listeners if not _allowed(settings, listener, ports)]
    port_names = {getattr(settings, n): env_name(n) for n in PORT_NAMES}
    assert not bad, (
        f"listeners off LAKE_HOST={settings.host} or off the settings' ports "
        f"({', '.join(f'{p} {n}' for p, n in sorted(port_names.items()))}):\n"
        + "\n".join(str(b) for b in bad)
        + "\nBind each to LAKE_HOST on a port from spark_jobs/settings.py (see spark_jobs/stack/services.py)")
    # Each long-running Spark driver is on its own settings' ports.
    for program, driver, block_manager in (
            ("thrift", settings.thrift_driver_port, settings.thrift_block_manager_port),
            ("spark-connect", settings.spark_connect_driver_port, settings.spark_connect_block_manager_port),
            ("stream", settings.stream_driver_port, settings.stream_block_manager_port)):
        have = {listener.port for listener in listeners if listener.program == program}
        assert {driver, block_manager} <= have, f"{program} listens on {sorted(have)}, not {driver}/{block_manager}"


def _secrets(settings: Settings) -> dict[str, str]:
    values = {env_name(name): str(getattr(settings, name)) for name in SECRET_NAMES}
    assert all(values.values()), f"a secret is empty: {[k for k, v in values.items() if not v]}"
    return values


def _cmdline_leaks(secrets: dict[str, str], pids: list[int] | None = None) -> list[str]:
    leaks = []
    for proc_dir in ([Path(f"/proc/{p}") for p in pids] if pids is not None else Path("/proc").glob("[0-9]*")):
        try:
            cmdline = (proc_dir / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        for name, value in secrets.items():
            if value in cmdline:
                leaks.append(f"pid {proc_dir.name} shows {name} in its command line: {cmdline[:200]}...")
    return leaks


def test_no_process_shows_a_secret_on_its_command_line(streaming: Settings) -> None:
    settings = streaming
    trees = _supervised(settings)
    assert "stream" in trees and any("java" in p.name() for p in trees["stream"]), \
        "the stream's Spark JVM is not running: the check would miss it"
    leaks = _cmdline_leaks(_secrets(settings))
    assert not leaks, ("secrets on command lines (readable by every local user in /proc/<pid>/cmdline):\n"
                       + "\n".join(leaks) + "\nPass them through a 0600 file or the environment instead")


def test_lake_sql_keeps_the_s3_keys_off_its_command_line(stack: Settings) -> None:
    """``lake sql --local`` (like every build_session user) starts a Spark JVM; scan its tree while it runs. (Plain
    ``lake sql`` is a Spark Connect client: no JVM, its token stays in the process.)"""
    secrets = _secrets(stack)
    base = {k: v for k, v in os.environ.items() if k not in ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE")}
    proc = subprocess.Popen([LAKE, "sql", "--local", "-e", "SHOW DATABASES"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=base)
    leaks: list[str] = []
    saw_jvm = False
    try:
        while proc.poll() is None:
            tree = _tree(proc.pid)
            try:
                saw_jvm = saw_jvm or any("SparkSubmit" in " ".join(p.cmdline()) for p in tree)
            except psutil.Error:
                pass
            leaks += _cmdline_leaks(secrets, [p.pid for p in tree])
            time.sleep(0.5)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, f"lake sql failed:\n{out[-2000:]}\n{err[-2000:]}"
    assert "default" in out, out[-2000:]
    assert saw_jvm, "never saw lake sql's Spark JVM: the scan checked nothing"
    assert not leaks, "lake sql put secrets on a command line:\n" + "\n".join(sorted(set(leaks)))


def test_nothing_under_the_state_dir_is_readable_by_others(streaming: Settings) -> None:
    """Group may traverse (x) the state dir, data/ and run/ when PostgreSQL runs as its own OS user; nothing else."""
    offenders = []
    checked = 0
    for root, dirs, files in os.walk(streaming.state_dir):
        for name in [*dirs, *files]:
            path = Path(root) / name
            try:
                mode = path.lstat().st_mode
            except FileNotFoundError:
                continue
            if stat.S_ISLNK(mode):
                continue
            checked += 1
            if mode & 0o067:
                offenders.append(f"{stat.filemode(mode)} {path}")
    top = streaming.state_dir.stat().st_mode
    assert not top & 0o067, f"{streaming.state_dir} is {stat.filemode(top)}: make it 0700"
    assert checked > 100, f"only {checked} entries under {streaming.state_dir}: is the stack's data elsewhere?"
    assert not offenders, (f"{len(offenders)} of {checked} entries under {streaming.state_dir} are open to group "
                           "or others (first 20):\n" + "\n".join(offenders[:20])
                           + "\nEvery program runs with umask 077 and `lake stack up` tightens what exists")
