"""spark_jobs.files.write_atomic, the one atomic-write helper, and the writers built on it (session.write_private,
quality.trend.write_atomic, streaming.common.write_json_atomic, streaming.engine.write_fair_scheduler): modes,
no leftovers, readers never see a part of a file."""

from __future__ import annotations

import json
import os
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from spark_jobs.files import write_atomic


@pytest.fixture
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_replaces_the_file_with_the_mode_asked_and_leaves_nothing_behind(tmp_path: Path, umask_022: None) -> None:
    target = tmp_path / "status.json"
    write_atomic(target, "first")
    assert target.read_text(encoding="utf-8") == "first" and mode(target) == 0o644  # 0666 less the umask
    write_atomic(target, "zweite Fassung: ü")
    assert target.read_text(encoding="utf-8") == "zweite Fassung: ü"
    secret = tmp_path / "secret.conf"
    write_atomic(secret, "password=x", private=True)
    assert mode(secret) == 0o600
    os.chmod(secret, 0o644)  # a new file replaces it: the mode is the new file's
    write_atomic(secret, "password=y", private=True)
    assert mode(secret) == 0o600 and secret.read_text() == "password=y"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["secret.conf", "status.json"]


def test_a_failed_write_keeps_the_old_file_and_removes_its_temporary(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "index.html"
    target.write_text("old")

    def refuse(src: object, dst: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(OSError, match="disk full"):
        write_atomic(target, "new")
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["index.html"]
    with pytest.raises(FileNotFoundError):
        write_atomic(tmp_path / "missing" / "x.json", "{}")  # the folder must exist


def test_a_reader_sees_the_old_or_the_new_file_never_a_part(tmp_path: Path) -> None:
    target = tmp_path / "page.html"
    versions = ["a" * 1_000_000, "b" * 2_000_000]
    write_atomic(target, versions[0])
    seen: set[int] = set()
    done = threading.Event()

    def read() -> None:
        while not done.is_set():
            seen.add(len(target.read_text()))

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for i in range(30):
            write_atomic(target, versions[i % 2])
    finally:
        done.set()
        reader.join()
    assert seen <= {1_000_000, 2_000_000}


def test_the_writers_built_on_it(tmp_path: Path, umask_022: None) -> None:
    from spark_jobs.quality.trend import write_atomic as write_trend
    from spark_jobs.session import write_private
    from spark_jobs.streaming.common import read_json, write_json_atomic

    private = tmp_path / "conf" / "env" / "kafka.json"
    write_private(private, '{"KEY": "secret"}')  # makes its folders, 0700
    assert mode(private) == 0o600 and mode(private.parent) == 0o700 and private.read_text() == '{"KEY": "secret"}'
    page = tmp_path / "trend.html"
    write_trend(page, "<html>trend</html>")
    assert mode(page) == 0o600 and page.read_text() == "<html>trend</html>"
    status = tmp_path / "stream-status.json"
    write_json_atomic(status, {"batch": 3, "query": "lake_cdc"})
    assert read_json(status) == {"batch": 3, "query": "lake_cdc"} and mode(status) == 0o644  # as before: the umask's
    assert status.read_text() == json.dumps({"batch": 3, "query": "lake_cdc"}, indent=1, sort_keys=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["conf", "stream-status.json", "trend.html"]


def test_the_fair_scheduler_pools_file_is_written_atomically_once(tmp_path: Path, umask_022: None) -> None:
    from spark_jobs.settings import load_settings
    from spark_jobs.streaming.engine import fair_scheduler_xml, write_fair_scheduler

    path = write_fair_scheduler(load_settings({"LAKE_STATE_DIR": str(tmp_path)}))
    assert path.read_text(encoding="utf-8") == fair_scheduler_xml() and mode(path) == 0o644  # no secrets
    assert mode(path.parent) == 0o700 and [p.name for p in path.parent.iterdir()] == [path.name]
    before = path.stat().st_mtime_ns
    assert write_fair_scheduler(load_settings({"LAKE_STATE_DIR": str(tmp_path)})) == path
    assert path.stat().st_mtime_ns == before  # unchanged: not rewritten
