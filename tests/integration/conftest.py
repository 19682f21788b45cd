"""Integration tests talk to the real local stack; it is started if not up. Helpers live in lakehelpers.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from spark_jobs.settings import Settings, load_settings
from tests.integration.lakehelpers import run_lake


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/integration" in str(item.fspath):
            item.add_marker(pytest.mark.integration)
    # Tests that stop and restart the shared stack go after every other test, whatever their file is called.
    items.sort(key=lambda item: item.get_closest_marker("runs_last") is not None)


@pytest.fixture(scope="session")
def stack() -> Iterator[Settings]:
    # Through the `lake` command, as a user starts it: run by root, it switches to the service user first
    # (spark_jobs.stack.service_user), so nothing in the state dir is written by root.
    run_lake("stack", "up", timeout=900)
    yield load_settings()


@pytest.fixture
def shop(stack: Settings) -> Iterator[Any]:
    """A connection to the shop database (closed after the test)."""
    import psycopg2

    conn = psycopg2.connect(stack.pg_dsn(stack.pg_shop_db))
    yield conn
    conn.close()
