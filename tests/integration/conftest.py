"""Integration tests talk to the real local stack; it is started if not up. Helpers live in lakehelpers.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from spark_jobs.settings import Settings


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/integration" in str(item.fspath):
            item.add_marker(pytest.mark.integration)
    # Tests that stop and restart the shared stack go after every other test, whatever their file is called.
    items.sort(key=lambda item: item.get_closest_marker("runs_last") is not None)


@pytest.fixture(scope="session")
def stack() -> Iterator[Settings]:
    from spark_jobs.stack import manager

    yield manager.up()


@pytest.fixture
def shop(stack: Settings) -> Iterator[Any]:
    """A connection to the shop database (closed after the test)."""
    import psycopg2

    conn = psycopg2.connect(stack.pg_dsn(stack.pg_shop_db))
    yield conn
    conn.close()
