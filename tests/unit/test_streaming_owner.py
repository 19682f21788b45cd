"""One driver per streaming query: the per-query claim against a second process (real flock, no Spark)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from spark_jobs.settings import load_settings
from spark_jobs.streaming.owner import QueryOwned, claim, lock_path

HOLDER = textwrap.dedent("""
    import sys, time
    from spark_jobs.settings import load_settings
    from spark_jobs.streaming.owner import claim
    held = claim(load_settings({"LAKE_STATE_DIR": sys.argv[1]}), ["lake_cdc"])
    print("held", flush=True)
    time.sleep(60)
""")


def test_second_claim_is_refused_naming_the_owner_and_freed_when_it_dies(tmp_path: Path) -> None:
    settings = load_settings({"LAKE_STATE_DIR": str(tmp_path)})
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(QueryOwned) as refused:
            claim(settings, ["lake_events", "lake_cdc"])
        message = str(refused.value)
        assert f"pid {holder.pid}" in message and "query lake_cdc" in message and "lake stream stop" in message
        # All or nothing: the free query claimed before the refusal was given back.
        claim(settings, ["lake_events"]).release()
    finally:
        holder.kill()
        holder.wait()
    # SIGKILL leaves the file but not the lock: the next driver (the supervisor's restart) claims at once.
    assert lock_path(settings, "lake_cdc").exists()
    held = claim(settings, ["lake_cdc"])
    assert f'"pid": {os.getpid()}' in lock_path(settings, "lake_cdc").read_text()
    held.release()


def test_other_queries_are_independent(tmp_path: Path) -> None:
    settings = load_settings({"LAKE_STATE_DIR": str(tmp_path)})
    cdc = claim(settings, ["lake_cdc"])
    try:
        events = claim(settings, ["lake_events"])  # a cdc-only driver and an events-only driver may run side by side
        assert f'"pid": {os.getpid()}' in lock_path(settings, "lake_events").read_text()
        events.release()
    finally:
        cdc.release()


def test_the_claim_names_this_process_and_its_command_line(tmp_path: Path) -> None:
    import json

    settings = load_settings({"LAKE_STATE_DIR": str(tmp_path)})
    held = claim(settings, ["lake_cdc"])
    try:
        owner = json.loads(lock_path(settings, "lake_cdc").read_text())
    finally:
        held.release()
    argv = Path(f"/proc/{os.getpid()}/cmdline").read_bytes().decode().split("\0")
    assert owner["pid"] == os.getpid() and owner["query"] == "lake_cdc"
    assert owner["cmdline"] == " ".join(argv).strip() and "pytest" in owner["cmdline"]
