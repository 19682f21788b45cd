"""``lake stack up|down|status|logs``: the local stack's lifecycle."""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psutil

from spark_jobs.settings import Settings, env_name, load_settings
from spark_jobs.stack import bootstrap, health, supervisor
from spark_jobs.stack.configs import render_configs
from spark_jobs.stack.errors import StackError
from spark_jobs.stack.secrets import ensure_env_file
from spark_jobs.stack.services import (
    Service,
    services,
    stream_program,
)
from spark_jobs.stack.supervisor import log_path
from spark_jobs.stack.tools import check_artifacts
from spark_jobs.waits import poll_until, retrying

log = logging.getLogger(__name__)

def prepared_settings() -> Settings:
    """Settings after making sure the state dir and its generated secrets exist."""
    first = load_settings()
    ensure_env_file(first.state_dir)
    return load_settings()


def _port_owner(port: int) -> str:
    try:
        for conn in psutil.net_connections(kind="inet"):
            if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_LISTEN:
                if conn.pid:
                    try:
                        proc = psutil.Process(conn.pid)
                        return f"pid {conn.pid} ({proc.name()})"
                    except psutil.Error:
                        return f"pid {conn.pid}"
                return "another program"
    except psutil.Error:
        pass
    return "another program"


def _port_in_use(host: str, port: int) -> bool:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def _running(settings: Settings, service: Service) -> bool:
    """Every program of ``service`` is up: RUNNING, or STARTING (spawned, within its ``start_secs``)."""
    infos = [supervisor.program_info(settings, p.name) for p in service.programs]
    return all(i is not None and i.get("statename") in {"RUNNING", "STARTING"} for i in infos)


def _tail(path: Path, lines: int = 25) -> str:
    if not path.exists():
        return f"(no log at {path})"
    data = path.read_bytes()[-20000:].decode(errors="replace").splitlines()
    return "\n".join(data[-lines:])


def _wait_healthy(settings: Settings, service: Service) -> None:
    """Probe once a second until healthy; fail at once when a program dies, or at the service's start timeout."""
    start = time.monotonic()
    last_report = start

    def probe() -> health.Probe:
        elapsed = time.monotonic() - start
        for prog in service.programs:
            state = (supervisor.program_info(settings, prog.name) or {}).get("statename")
            if state in {"FATAL", "EXITED", "BACKOFF"} and elapsed > 2:
                raise StackError(
                    f"{service.name}: process {prog.name} is {state}. Log {log_path(settings, prog.name)}:\n"
                    f"{_tail(log_path(settings, prog.name))}\nHint: {service.hint}"
                )
        return service.probe(settings)

    def report(_waited: float, probed: health.Probe) -> None:
        nonlocal last_report
        if time.monotonic() - last_report > 15:
            log.info(f"  {service.name:<9} waiting ({time.monotonic() - start:.0f}s): {probed[1][:160]}")
            last_report = time.monotonic()

    ok, detail = poll_until(probe, lambda probed: probed[0], service.start_timeout, 1.0, report)
    if not ok:
        raise StackError(
            f"{service.name} did not become healthy within {service.start_timeout:.0f}s at "
            f"{service.endpoint}: {detail}\nLog {log_path(settings, service.main)} (last lines):\n"
            f"{_tail(log_path(settings, service.main))}\nHint: {service.hint}"
        )
    log.info(f"  {service.name:<9} healthy in {time.monotonic() - start:5.1f}s  {service.endpoint}  ({detail})")


def _check_ports_free(settings: Settings, service: Service) -> None:
    for setting in service.port_settings:
        port = getattr(settings, setting)
        if _port_in_use(settings.host, port):
            raise StackError(
                f"{service.name}: port {port} on {settings.host} is taken by {_port_owner(port)}; "
                f"stop that program or set {env_name(setting)} to a free port (in the environment or "
                f"{settings.state_dir / '.env'})"
            )


def _pre_probe(settings: Settings, service: Service) -> None:
    """The service's ``pre_probe`` hook, retried while its process is still starting (up to its start timeout)."""
    hook = service.pre_probe
    if hook is None:
        return
    try:
        retrying(lambda: hook(settings), Exception, every=1.0, timeout=service.start_timeout)
    except Exception as exc:
        logfile = log_path(settings, service.main)
        raise StackError(f"{service.name}: could not {service.pre_probe_what} at {service.endpoint}: {exc}\n"
                         f"Log {logfile}:\n{_tail(logfile)}") from exc


def up(only: list[str] | None = None) -> Settings:
    """Start the stack (or the named services and what they need); a no-op if healthy."""
    os.umask(bootstrap.UMASK)  # before anything is created: secrets, configs, initdb, Kafka storage
    settings = prepared_settings()
    tightened = bootstrap.secure_state_dir(settings)
    if tightened:
        log.info(f"  made {tightened} file(s)/folder(s) under {settings.state_dir} private (no group/other access)")
    check_artifacts(settings)
    for d in (settings.data_dir, settings.log_dir, settings.run_dir, settings.conf_dir):
        d.mkdir(parents=True, exist_ok=True)
    render_configs(settings)
    every_service = services(settings)
    all_services = every_service
    names = [s.name for s in all_services]
    if only:
        bad = [n for n in only if n not in names]
        if bad:
            raise StackError(f"unknown service(s) {', '.join(bad)}; choose from {', '.join(names)}")
        # Everything up to the last requested service, in dependency order.
        last = max(names.index(n) for n in only)
        all_services = all_services[: last + 1]
    log.info(f"lake stack up: state in {settings.state_dir}")
    supervisor.start_daemon(settings, every_service)
    for service in all_services:
        if _running(settings, service):
            ok, _ = service.probe(settings)
            if ok:
                log.info(f"  {service.name:<9} already running  {service.endpoint}")
        else:
            _check_ports_free(settings, service)
            if service.prepare:
                service.prepare(settings)
            log.info(f"  {service.name:<9} starting")
            for prog in service.programs:
                supervisor.start_program(settings, prog.name)
            ok = False
        _pre_probe(settings, service)
        if not ok:
            _wait_healthy(settings, service)
        if service.after_start:
            service.after_start(settings)
    return settings


def down(settings: Settings | None = None) -> None:
    """Stop supervisord and its programs, then kill what is left of this state dir's stack (:func:`owned_by`)."""
    settings = settings or load_settings()
    pid = supervisor.daemon_pid(settings)
    if pid is None:
        log.info(f"lake stack down: nothing running for {settings.state_dir}")
    else:
        log.info(f"lake stack down: stopping supervisord (pid {pid}) and its programs")
        supervisor.shutdown(settings)
    leftovers = _leftover_processes(settings)
    for proc in leftovers:
        log.info(f"  killing leftover process {proc.pid}: {' '.join(proc.cmdline())[:120]}")
        try:
            proc.kill()
        except psutil.Error:
            pass
    log.info("  stopped")


def _path_pattern(state_dir: Path) -> re.Pattern[str]:
    """``state_dir`` as a whole path in an argument: the argument itself, a path under it, or a value after ``=``,
    ``:`` or ``,`` (``-Dx=<dir>/conf``, a class path). ``/x/.lake`` does not match ``/x/.lake-cluster``."""
    dirs = sorted({str(state_dir), os.path.abspath(state_dir)}, key=len, reverse=True)
    alternatives = "|".join(re.escape(d.rstrip("/")) for d in dirs)
    return re.compile(rf"(?:^|(?<=[\s=:,;'\"]))(?:{alternatives})(?=$|[/\s=:,;'\"])")


def _is_client(cmdline: list[str]) -> bool:
    """A ``lake`` command or a pytest run: names the state dir in its arguments but is not one of the stack's."""
    head = [os.path.basename(a) for a in cmdline[:3]]
    return any(h in ("lake", "pytest", "py.test") for h in head) or "pytest" in cmdline[1:3] \
        or any(a.startswith("spark_jobs.cli") for a in cmdline[1:3])


def owned_by(state_dir: Path, cmdline: list[str], environ: dict[str, str] | None) -> bool:
    """Whether a process with ``cmdline`` and ``environ`` (None: not readable) belongs to the stack of
    ``state_dir``.

    The stack's supervisord is started with :data:`~spark_jobs.stack.supervisor.OWNER_ENV` set to its state dir,
    and every program and their children inherit it: where the marker is present, it alone decides. A process
    without it (unreadable environment, or started by an older ``lake``) belongs if an argument names the state
    dir as a whole path (not a prefix of ``<dir>-cluster``) and it is not a ``lake`` command or pytest run.
    """
    owner = (environ or {}).get(supervisor.OWNER_ENV)
    if owner is not None:
        return owner in (str(state_dir), os.path.abspath(state_dir))
    pattern = _path_pattern(state_dir)
    return any(pattern.search(arg) for arg in cmdline) and not _is_client(cmdline)


def stack_processes(state_dir: Path) -> list[psutil.Process]:
    """Live processes of the stack in ``state_dir`` (:func:`owned_by`), except this process and its ancestors."""
    me = psutil.Process()
    skip = {me.pid, *(p.pid for p in me.parents())}
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        if proc.info["pid"] in skip:
            continue
        try:
            environ: dict[str, str] | None = proc.environ()
        except psutil.Error:
            environ = None  # another user's process (or gone): its arguments decide
        if owned_by(state_dir, list(proc.info["cmdline"] or []), environ):
            found.append(proc)
    return found


def _leftover_processes(settings: Settings) -> list[psutil.Process]:
    """Processes of our stack still alive after supervisord stopped (e.g. a child that escaped its group)."""
    return stack_processes(settings.state_dir)


#: What a state dir made by ``lake stack up`` holds; ``lake stack clean`` deletes only a folder with one of them.
_STATE_DIR_ENTRIES = (".env", "conf", "data", "logs", "run")


def clean_refusal(state_dir: Path) -> str | None:
    """Why ``state_dir`` must not be deleted by ``lake stack clean`` (None: it may be): the checkout, a folder
    holding it, ``/`` or a home, or an existing folder that does not look like a state dir (a mistyped
    ``LAKE_STATE_DIR``)."""
    from spark_jobs.settings import REPO_ROOT

    target = Path(os.path.abspath(state_dir))
    if target == target.parent or target in (Path.home().absolute(), Path(os.path.abspath(REPO_ROOT))) \
            or target in Path(os.path.abspath(REPO_ROOT)).parents:
        return f"{target} is the checkout, a folder holding it, / or a home: not a state dir; check LAKE_STATE_DIR"
    if target.is_symlink() or (target.exists() and not target.is_dir()):
        return f"{target} is not a folder (a link or a file): delete it by hand if it is really the state dir"
    if target.is_dir() and any(target.iterdir()) and not any((target / e).exists() for e in _STATE_DIR_ENTRIES):
        return (f"{target} does not look like a Lakestream state dir (none of {', '.join(_STATE_DIR_ENTRIES)} in it); "
                "check LAKE_STATE_DIR")
    return None


def clean(settings: Settings) -> None:
    """Stop the stack (:func:`down`), then delete its state dir: data, logs and secrets.

    The folder itself stays (empty) when its parent is not writable by whoever runs this (the service user
    ``lake`` switches to, in a root-owned checkout)."""
    import shutil

    state_dir = settings.state_dir
    problem = clean_refusal(state_dir)
    if problem:
        raise StackError(f"lake stack clean: refusing: {problem}")
    down(settings)
    if not state_dir.exists():
        log.info(f"lake stack clean: {state_dir} does not exist; nothing to delete")
        return
    for entry in sorted(state_dir.iterdir()):
        try:
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        except OSError as exc:
            raise StackError(f"lake stack clean: could not delete {entry}: {exc}; delete it as its owner") from exc
    try:
        state_dir.rmdir()
        log.info(f"lake stack clean: deleted {state_dir}")
    except PermissionError:
        log.info(f"lake stack clean: emptied {state_dir} (its parent is not writable by this user, so the empty "
                 "folder stays)")


#: supervisord states of a program that has failed: a crash loop given up (FATAL), retrying after quick exits
#: (BACKOFF), or a status supervisord cannot tell (UNKNOWN).
FAILED_STATES = ("FATAL", "BACKOFF", "UNKNOWN")


def _program_status(settings: Settings, name: str, info: dict[str, Any] | None,
                    history: dict[str, supervisor.ProgramHistory]) -> dict[str, Any]:
    """One program as ``lake stack status`` shows it: state, pid, uptime, restarts since ``up``, last exit."""
    h = history.get(name, supervisor.ProgramHistory())
    state = str((info or {}).get("statename") or "NOT SUPERVISED")
    up = state in {"RUNNING", "STARTING"} and info is not None
    last_exit = h.last_exit
    if last_exit is None and info and info.get("stop"):
        last_exit = f"exit status {info.get('exitstatus')}"
    return {
        "state": state,
        "pid": ((info or {}).get("pid") or None) if up else None,
        "uptime_s": max(0, int(info["now"]) - int(info["start"])) if up and info else None,
        "restarts": h.restarts,
        "last_exit": last_exit,
        "log": str(log_path(settings, name)),
    }


def _failure(name: str, prog: dict[str, Any], then: str) -> str:
    if prog["state"] == "FATAL":
        how = f"last exit: {prog['last_exit']}" if prog["last_exit"] else "it could not be spawned"
        return (f"{name} is FATAL: it kept exiting within its start time and supervisord gave up ({how}); "
                f"see {prog['log']}, fix the cause, then {then}")
    if prog["state"] == "BACKOFF":
        return (f"{name} is BACKOFF: it exited within its start time ({prog['last_exit']}) and supervisord is "
                f"retrying it; see {prog['log']}")
    return f"{name} is {prog['state']}; see {prog['log']}, then {then}"


def recent_restarts(times: Sequence[datetime], now: datetime, window_minutes: int) -> int:
    """How many of the restart ``times`` fall in the ``window_minutes`` before ``now``."""
    since = now - timedelta(minutes=window_minutes)
    return sum(1 for t in times if since <= t <= now)


def restart_loop_failure(name: str, prog: dict[str, Any], times: Sequence[datetime], now: datetime,
                         max_restarts: int, window_minutes: int, last_error: str | None) -> str | None:
    """Why ``name`` counts as failed although supervisord keeps it RUNNING: more than ``max_restarts`` restarts
    after unexpected exits within ``window_minutes`` (a crash loop whose every run outlives its start time, which
    supervisord restarts forever), with the last error; None when it restarted less often."""
    recent = recent_restarts(times, now, window_minutes)
    if recent <= max_restarts:
        return None
    error = last_error or (f"last exit: {prog['last_exit']}" if prog.get("last_exit") else "no error in its log")
    return (f"{name} keeps restarting: {recent} restarts after unexpected exits in the last {window_minutes} minutes "
            f"(more than LAKE_STREAM_MAX_RESTARTS={max_restarts} in LAKE_STREAM_RESTART_WINDOW_MINUTES="
            f"{window_minutes}); last error: {error}; see {prog['log']}, fix the cause (a poison record: "
            "quarantine.cdc, docs/architecture.md 'CDC path'), then `lake stream stop` and `lake stream start`")


#: A Python exception's own line (``OverflowError: int too big to convert``), as a traceback ends.
_PY_ERROR = re.compile(r"^\s*(?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception)(?::\s.*)?$")
#: The streaming app's line when a query stops it (spark_jobs.streaming.app).
_QUERY_FAILED = re.compile(r"lake stream: query \S+ failed: ")


def last_error(log: Path, tail_bytes: int = 512 * 1024, limit: int = 400) -> str | None:
    """The last error in a program's log (its last ``tail_bytes``): the streaming app's "query ... failed" line
    with the innermost Python exception line logged after it (a Python worker's traceback, e.g. the parse's),
    else the last exception line; None if there is none or the log cannot be read."""
    try:
        with log.open("rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - tail_bytes))
            lines = f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return None

    def clip(text: str) -> str:
        text = text.strip()
        return text if len(text) <= limit else text[:limit] + "..."

    for i in range(len(lines) - 1, -1, -1):
        if m := _QUERY_FAILED.search(lines[i]):
            # Python's own exceptions (no dotted module: not a JVM or pyspark wrapper) name the root cause.
            causes = [ln for ln in lines[i + 1:] if _PY_ERROR.match(ln) and "." not in ln.split(":", 1)[0]]
            return clip(lines[i][m.start():]) + (f" (cause: {clip(causes[-1])})" if causes else "")
    errors = [ln for ln in lines if _PY_ERROR.match(ln)]
    return clip(errors[-1]) if errors else None


def _disk(settings: Settings) -> dict[str, Any]:
    """Free space where the state dir lives (Kafka segments, PostgreSQL WAL, MinIO objects, logs)."""
    import shutil

    path = settings.state_dir if settings.state_dir.exists() else settings.state_dir.parent
    free = shutil.disk_usage(path).free
    minimum = settings.stack_min_free_disk_mb * 1024 * 1024
    return {"path": str(path), "free_mb": free // (1024 * 1024), "min_free_mb": settings.stack_min_free_disk_mb,
            "ok": free >= minimum}


def status(settings: Settings | None = None) -> dict[str, Any]:
    """Every service (healthy or not, with each program's uptime, restarts and last exit), the streaming app,
    free disk in the state dir, and ``ok``: False when a service is down, a program FATAL/BACKOFF, or the stream
    restarted more than ``stream_max_restarts`` times in ``stream_restart_window_minutes`` (:func:`restart_loop_failure`),
    or a record it has not archived is past ``retention_fail_fraction`` of its topic's Kafka retention (:func:`_retention`;
    past ``retention_warn_fraction``: a warning)."""
    settings = settings or load_settings()
    daemon = supervisor.daemon_pid(settings) is not None
    history = supervisor.program_history(settings) if daemon else {}
    out: dict[str, Any] = {}
    for service in services(settings):
        programs = {p.name: _program_status(settings, p.name,
                                            supervisor.program_info(settings, p.name) if daemon else None, history)
                    for p in service.programs}
        running = daemon and all(p["state"] in {"RUNNING", "STARTING"} for p in programs.values())
        healthy = False
        detail = "not running (lake stack up)" if daemon else "supervisord is not running (lake stack up)"
        failed = [_failure(n, p, "`lake stack up`") for n, p in programs.items() if p["state"] in FAILED_STATES]
        if failed:
            detail = "; ".join(failed)
        elif running:
            healthy, detail = (service.status_probe or service.probe)(settings)
        out[service.name] = {
            "healthy": healthy,
            "pid": programs[service.main]["pid"] if running else None,
            "endpoint": service.endpoint,
            "log": str(log_path(settings, service.main)),
            "detail": detail,
            "programs": programs,
        }
    stream_name = stream_program(settings).name
    stream = _program_status(settings, stream_name,
                             supervisor.program_info(settings, stream_name) if daemon else None, history)
    # Stopped (never started, or `lake stream stop`) is a choice, not a failure.
    stream["healthy"] = stream["state"] not in FAILED_STATES
    stream["detail"] = (_failure(stream_name, stream, "`lake stream start`") if not stream["healthy"]
                        else "`lake stream status` shows its lag" if stream["state"] in {"RUNNING", "STARTING"}
                        else "not running (lake stream start)")
    # supervisord restarts a run that outlived its start time every time: a crash loop it never stops.
    restart_times = history.get(stream_name, supervisor.ProgramHistory()).restart_times
    now = datetime.now()  # supervisord logs its local time
    stream["recent_restarts"] = recent_restarts(restart_times, now, settings.stream_restart_window_minutes)
    if stream["healthy"] and stream["recent_restarts"] > settings.stream_max_restarts:
        stream["healthy"] = False
        stream["detail"] = restart_loop_failure(stream_name, stream, restart_times, now, settings.stream_max_restarts,
                                                settings.stream_restart_window_minutes,
                                                last_error(log_path(settings, stream_name)))
    warnings: list[str] = []
    retention: dict[str, Any] = _retention(settings) if out.get("kafka", {}).get("healthy") else {"checked": False}
    warnings += retention.get("warnings", [])
    failures: list[str] = retention.get("failures", [])
    if failures and stream["healthy"]:
        stream["healthy"] = False
        more = len(failures) - 1
        stream["detail"] = ("Kafka is about to delete records the stream has not archived: " + failures[0]
                            + (f" (and {more} more partition(s): --json)" if more else ""))
    disk = _disk(settings)
    if not disk["ok"]:
        warnings.append(f"low disk: {disk['free_mb']} MB free under {disk['path']} (below LAKE_STACK_MIN_FREE_DISK_MB="
                        f"{disk['min_free_mb']}); Kafka, PostgreSQL's WAL and MinIO stop when it fills: free space, "
                        "lower LAKE_KAFKA_*_RETENTION_BYTES, or move LAKE_STATE_DIR to a bigger disk")
    ok = all(s["healthy"] for s in out.values()) and stream["healthy"]
    return {"ok": ok, "services": out, "stream": stream, "retention": retention, "disk": disk, "warnings": warnings}


def _retention(settings: Settings) -> dict[str, Any]:
    """The stream's input topics against their Kafka retention (:mod:`spark_jobs.streaming.retention`):
    ``failures`` and ``warnings`` lines, and per partition what is behind. A check that cannot run is a warning."""
    from spark_jobs.streaming import retention

    try:
        partitions = retention.measure(settings)
    except Exception as exc:  # noqa: BLE001  # Kafka answered its probe: a failure here is a line, not a crash
        return {"checked": False, "warnings": [f"could not compare the stream's lag with Kafka's retention: {exc}"]}
    failures, warnings = retention.assess(partitions, settings.retention_warn_fraction,
                                          settings.retention_fail_fraction)
    return {"checked": True, "failures": failures, "warnings": warnings,
            "partitions": {p.name: {"behind": p.behind, "lost": p.lost, "age_s": p.age_s, "bytes_behind": p.bytes_behind,
                                    "retention_ms": p.retention_ms, "retention_bytes": p.retention_bytes,
                                    "limit": p.limit, "compacted_unread": p.compacted_unread,
                                    "fraction": round(p.fraction, 4)} for p in partitions}}


def _uptime(seconds: int | None) -> str:
    if seconds is None:
        return "-"
    minutes, sec = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    return (f"{days}d" if days else "") + f"{hours}:{minutes:02d}:{sec:02d}"


def _program_line(name: str, prog: dict[str, Any]) -> str:
    return (f"{name:<22} {prog['state']:<8} {prog['pid'] or '-':<8} {_uptime(prog['uptime_s']):<11} "
            f"{prog['restarts']:<9} {prog['last_exit'] or '-'}")


def format_status(report: dict[str, Any]) -> list[str]:
    """``lake stack status`` for people: a line per service, then one per supervised program, then warnings."""
    lines = []
    for name, svc in report["services"].items():
        mark = "healthy" if svc["healthy"] else "DOWN"
        lines.append(f"{name:<14} {mark:<8} {svc['endpoint']:<45} {svc['detail']}")
    stream = report["stream"]
    lines.append(f"{'stream':<14} {'ok' if stream['healthy'] else 'FAILED':<8} {'':<45} {stream['detail']}")
    lines.append("")
    lines.append(f"  {'program':<22} {'state':<8} {'pid':<8} {'uptime':<11} {'restarts':<9} last exit "
                 "(restarts and exits since supervisord started: lake stack up)")
    for svc in report["services"].values():
        lines += ["  " + _program_line(n, p) for n, p in svc["programs"].items()]
    lines.append("  " + _program_line("stream", stream))
    disk = report["disk"]
    lines.append("")
    lines.append(f"disk: {disk['free_mb']} MB free under {disk['path']} (warns below {disk['min_free_mb']} MB)")
    lines += [f"WARNING: {w}" for w in report["warnings"]]
    return lines


def logs(service: str, lines: int) -> str:
    settings = load_settings()
    known = {p.name: p for s in services(settings) for p in s.programs}
    known[stream_program(settings).name] = stream_program(settings)
    aliases = {s.name: s.main for s in services(settings)}
    program = aliases.get(service, service)
    if program not in known:
        raise StackError(f"unknown service {service!r}; choose from {', '.join(sorted(set(aliases) | set(known)))}")
    return _tail(log_path(settings, program), lines)
