"""`lake sql` refuses a write to a stream-owned table and names its writer (docs/operations.md, Second writers); reads
still run."""

from __future__ import annotations

import sys

import pytest

from spark_jobs.settings import Settings
from tests.integration.lakehelpers import run_lake


def test_lake_sql_refuses_writes_to_stream_tables(stack: Settings) -> None:
    for stmt in ("DELETE FROM silver.orders WHERE false", "USE bronze; INSERT INTO shop__public__orders SELECT * "
                 "FROM shop__public__orders WHERE false"):
        proc = run_lake("sql", "-e", stmt, check=False)
        assert proc.returncode == 1, (proc.stdout, proc.stderr)
        assert "lake sql: refusing" in proc.stderr and "streaming app, query lake_cdc" in proc.stderr, proc.stderr
    assert run_lake("sql", "-e", "SHOW TABLES IN silver").returncode == 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-v"]))
