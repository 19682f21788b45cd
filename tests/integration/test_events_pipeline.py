"""Events end to end on the real stack: loadgen -> Kafka -> bronze -> silver -> hot (+ quarantine).

Every check is `lake reconcile events --manifest <the loadgen's manifest>`: what
the loadgen says it sent, per category (unique valid, late, duplicates, each
malformed kind, per event type, revenue), must equal what the tables hold,
record by record, with no event twice in silver and every hot window equal to
the same aggregation computed in batch from silver.events. Crash tests SIGKILL
the streaming driver, and restart the Kafka broker, during the load.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from spark_jobs.settings import REPO_ROOT, Settings
from spark_jobs.stack import health, supervisor
from tests.integration.lakehelpers import LAKE, kill_program, lake_sql, run_lake, wait_running, wait_stream, wait_until

LOAD = ("--late", "0.05", "--dup", "0.05", "--bad", "0.04")


@pytest.fixture(scope="module")
def events(stack: Settings) -> Iterator[Settings]:
    run_lake("stream", "start")
    yield stack


def _manifest(settings: Settings, name: str) -> Path:
    return settings.run_dir / "test-events" / f"{name}.json"


def _loadgen(settings: Settings, name: str, rate: int, duration: int, seed: int) -> subprocess.Popen[str]:
    path = _manifest(settings, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    return subprocess.Popen([LAKE, "loadgen", "events", "--rate", str(rate), "--duration", str(duration),
                             "--seed", str(seed), "--manifest", str(path), *LOAD],
                            cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _finish(proc: subprocess.Popen[str]) -> None:
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out[-3000:]


def _reconcile(settings: Settings, name: str) -> dict[str, object]:
    wait_stream(900)
    proc = run_lake("reconcile", "events", "--manifest", str(_manifest(settings, name)), "--all-windows", "--json",
                    check=False, timeout=900)
    report: dict[str, object] = json.loads(proc.stdout)
    assert report["problems"] == [], json.dumps(report, indent=1, default=str)
    assert proc.returncode == 0
    return report


def test_seeded_run_reconciles_exactly(events: Settings) -> None:
    _finish(_loadgen(events, "seeded", rate=1500, duration=10, seed=101))
    report = _reconcile(events, "seeded")
    ledger = report["ledger"]
    manifest = json.loads(_manifest(events, "seeded").read_text())
    assert isinstance(ledger, dict)
    # Every category really occurred, so each term of the ledger was exercised.
    assert ledger["duplicates"] > 0 and ledger["quarantined"] > 0 and ledger["silver_sent_late"] > 0
    assert ledger["received"] == manifest["total_sent"] > 10_000
    assert ledger["unaccounted"] == 0 and ledger["silver_event_ids_twice"] == 0
    hot = report["hot"]
    assert isinstance(hot, dict)
    for name, t in hot["tables"].items():
        assert t["windows"] > 0, name
        assert t["differing_windows"] == [], name


def test_bad_records_land_in_quarantine_with_reason_and_coordinates(events: Settings) -> None:
    rows = {row["reason"]: row for row in lake_sql(
        "SELECT reason, count(*) AS n, min(offset) AS first_offset, "
        "max(length(value)) AS longest FROM quarantine.events GROUP BY reason ORDER BY reason")}
    assert {"not_json", "wrong_type", "missing_field", "oversized"} <= set(rows), rows
    assert all(r["n"] > 0 and r["first_offset"] >= 0 for r in rows.values())
    from spark_jobs.contracts.clickstream import MAX_EVENT_BYTES

    assert rows["oversized"]["longest"] > MAX_EVENT_BYTES  # the raw bytes are kept whole


def _restarts(settings: Settings) -> int:
    return supervisor.program_history(settings).get("stream", supervisor.ProgramHistory()).restarts


def _only_the_kills_restarted(settings: Settings, before: int, kills: int) -> None:
    """The supervisor restarted the app once per SIGKILL and never for a crash of the restarted app (a replayed
    batch's state store once failed Spark's commit check after a kill and cost a crash and one more restart)."""
    history = supervisor.program_history(settings).get("stream", supervisor.ProgramHistory())
    assert history.restarts - before == kills, (
        f"{history.restarts - before} restarts for {kills} kill(s); last exit: {history.last_exit}; "
        f"see {settings.log_dir / 'stream.log'}")


def test_driver_sigkilled_during_load_still_reconciles(events: Settings) -> None:
    rng = random.Random(17)
    before = _restarts(events)
    load = _loadgen(events, "sigkill", rate=1500, duration=30, seed=202)
    for _ in range(2):
        time.sleep(rng.uniform(8, 16))
        pid = kill_program(events, "stream")
        wait_running(events, "stream", pid)
    _finish(load)
    _reconcile(events, "sigkill")
    _only_the_kills_restarted(events, before, 2)


def _kill_at_failpoint(settings: Settings, failpoint: str, line: bytes, name: str, seed: int) -> None:
    """Under load, hold the archive query at ``failpoint`` (its log ``line`` says it holds), SIGKILL the app
    there, let it restart and drain: the ledger balances and the supervisor restarted it for the kill only."""
    log = settings.log_dir / "stream.log"
    log_start = log.stat().st_size if log.exists() else 0
    hold = settings.run_dir / "failpoints" / failpoint
    hold.parent.mkdir(parents=True, exist_ok=True)
    hold.touch()
    before = _restarts(settings)
    try:
        load = _loadgen(settings, name, rate=1500, duration=20, seed=seed)
        deadline = time.monotonic() + 180
        while True:
            with log.open("rb") as f:
                f.seek(log_start)
                if line in f.read():
                    break
            assert time.monotonic() < deadline, f"no batch reached the failpoint {failpoint}"
            time.sleep(0.05)
        pid = kill_program(settings, "stream")
    finally:
        hold.unlink(missing_ok=True)
    wait_running(settings, "stream", pid)
    _finish(load)
    _reconcile(settings, name)
    _only_the_kills_restarted(settings, before, 1)


@pytest.mark.extended  # a second kill point (the core suite SIGKILLs the driver during load)
def test_driver_killed_after_the_hot_commit_before_the_appends_lands_the_batch_once(events: Settings) -> None:
    """An archive batch counted but whose bronze/silver/quarantine rows and ledger row are not written (Spark has
    not committed its offsets; the hot query has committed the same records in its own batches): SIGKILL exactly
    then. The next start re-runs the batch from the checkpoint: the appends land, once, and the hot tables still
    equal silver (their batches are skipped where they landed)."""
    from spark_jobs.streaming.archive import HOLD_BEFORE_APPEND_FAILPOINT

    _kill_at_failpoint(events, HOLD_BEFORE_APPEND_FAILPOINT, b"holding before the appends", "append-gap", 404)


@pytest.mark.extended  # a third kill point
def test_driver_killed_after_the_ledger_before_the_offsets_commit_replays_the_batch_once(events: Settings) -> None:
    """A batch in the ledger (every table holds it) whose offsets Spark has not committed: SIGKILL exactly then.
    The next start replays it from the checkpoint, writes nothing for it, and still runs its plan, so its
    de-duplication state commits: the restarted app keeps running (it once failed Spark's state-store commit
    check there and crashed) and the ledger balances."""
    from spark_jobs.streaming.archive import HOLD_AFTER_LEDGER_FAILPOINT

    log = events.log_dir / "stream.log"
    log_start = log.stat().st_size if log.exists() else 0
    _kill_at_failpoint(events, HOLD_AFTER_LEDGER_FAILPOINT, b"holding before the offsets commit", "ledger-gap", 606)
    with log.open("rb") as f:
        f.seek(log_start)
        assert b"is in the ledger already" in f.read(), "the restarted app did not replay the batch in the ledger"


@pytest.mark.extended  # another failure under load (the core suite SIGKILLs the driver)
def test_broker_restart_during_load_still_reconciles(events: Settings) -> None:
    """The broker goes away for 5 s under load: the stream rides it out on its own (the same driver process, not
    restarted by the test or by the supervisor), and the ledger balances."""
    before = (supervisor.program_info(events, "stream") or {}).get("pid")
    assert before, "the stream must be running before the broker restart"
    load = _loadgen(events, "broker", rate=1500, duration=30, seed=303)
    time.sleep(random.Random(18).uniform(6, 12))
    supervisor.stop_program(events, "kafka")
    time.sleep(5)
    supervisor.start_program(events, "kafka")
    wait_until(lambda: health.kafka(events)[0], "Kafka to come back after the restart", 180, every=2)
    _finish(load)
    info = supervisor.program_info(events, "stream") or {}
    # STARTING is the same process too when the stack came up less than supervisord's startsecs ago
    assert info.get("statename") in ("STARTING", "RUNNING") and info.get("pid") == before, (
        f"the stream did not survive the broker restart on its own: {info} (pid before: {before}); "
        f"see {events.log_dir / 'stream.log'}")
    _reconcile(events, "broker")


def test_stream_status_shows_the_events_query(events: Settings) -> None:
    rep = json.loads(run_lake("stream", "status", "--json").stdout)
    t = rep["tables"]["silver.events"]
    assert t["kafka_lag"] == 0 and t["last_batch"] is not None
    assert t["totals"]["received"] >= t["totals"]["appended"] > 0


@pytest.mark.extended  # test_lifecycle stops the stream with the stack; the SIGKILL test proves the restart
def test_a_planned_stop_during_load_drains_and_exits_cleanly(events: Settings) -> None:
    """`lake stream stop` signals the driver alone: it stops its queries after their batch and exits 0 (it used
    to exit 1 with py4j errors: the group signal killed its JVM under it)."""
    log = events.log_dir / "stream.log"
    log_start = log.stat().st_size
    load = _loadgen(events, "planned-stop", rate=1500, duration=15, seed=505)
    time.sleep(8)
    run_lake("stream", "stop")
    info = supervisor.program_info(events, "stream") or {}
    with log.open("rb") as f:
        f.seek(log_start)
        tail = f.read().decode("utf-8", "replace")
    assert info.get("statename") == "STOPPED" and info.get("exitstatus") == 0, (info, tail[-3000:])
    assert "stopping after the current batches" in tail, tail[-3000:]
    assert "Py4JNetworkError" not in tail and "Connection refused" not in tail, tail[-3000:]
    run_lake("stream", "start")
    _finish(load)
    _reconcile(events, "planned-stop")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-v"]))
