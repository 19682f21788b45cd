"""A deleted table path restored from the bucket's old versions (docs/operations.md, Versioning and restore): a Delta table is
written with `lake sql`, every object under its path is deleted, `lake restore-path` brings it back as it was,
and Spark reads the same rows. Also checks what `lake stack up` set: versioning and the expiry rule."""

from __future__ import annotations

import os
import sys
import time
from datetime import UTC, datetime
from typing import Any

import pytest

from spark_jobs.settings import Settings
from spark_jobs.stack import s3_restore
from spark_jobs.stack.bootstrap import LIFECYCLE_RULE_ID
from spark_jobs.table_io import table_location
from tests.integration.lakehelpers import lake_sql, run_lake


def test_bucket_is_versioned_with_noncurrent_expiry(stack: Settings) -> None:
    from minio import Minio

    root = Minio(stack.s3_endpoint.split("://", 1)[1], access_key=stack.minio_root_user,
                 secret_key=stack.minio_root_password, secure=False, region=stack.s3_region)
    assert root.get_bucket_versioning(stack.s3_bucket).status == "Enabled"
    lifecycle: Any = root.get_bucket_lifecycle(stack.s3_bucket)
    assert [(r.rule_id, r.noncurrent_version_expiration.noncurrent_days) for r in lifecycle.rules] == [
        (LIFECYCLE_RULE_ID, stack.s3_noncurrent_days)]


def test_deleted_table_is_restored_with_the_same_rows(stack: Settings) -> None:
    table = f"ops.restore_probe_{os.getpid()}"
    s3 = s3_restore.client(stack)
    bucket, prefix = s3_restore.split_s3_uri(table_location(stack, table))
    try:
        run_lake("sql", "-e", f"CREATE TABLE {table} (id INT, name STRING) USING delta; "
                 f"INSERT INTO {table} VALUES (1, 'a'), (2, 'b'); INSERT INTO {table} VALUES (3, 'c')")
        before = lake_sql(f"SELECT * FROM {table} ORDER BY id")
        assert [r["id"] for r in before] == [1, 2, 3]
        time.sleep(1.5)  # object times have millisecond precision: keep the delete clearly after `at`
        at = datetime.now(UTC)
        time.sleep(1.5)
        objects = list(s3.list_objects(bucket, prefix=prefix, recursive=True))
        keys = [o.object_name for o in objects]
        # The files the table held at `at` (folder markers such as Delta's empty `_staged_commits/` hold nothing:
        # MinIO lists no version of them, and the table reads the same without them).
        held = [o.object_name for o in objects if o.last_modified is not None and o.last_modified <= at
                and not o.object_name.endswith("/")]
        assert any("/_delta_log/" in k for k in keys) and any(k.endswith(".parquet") for k in keys), keys
        for key in keys:  # the accident: every object of the table deleted with the lake's own keys
            s3.remove_object(bucket, key)
        assert not list(s3.list_objects(bucket, prefix=prefix, recursive=True))
        gone = run_lake("sql", "--format", "json", "-e", f"SELECT * FROM {table}", check=False)
        assert gone.returncode != 0, gone.stdout

        dry = run_lake("restore-path", table, "--at", at.isoformat(), "--dry-run")
        would = {line.split()[2] for line in dry.stdout.splitlines() if line.startswith("would copy")}
        assert would == set(held), (sorted(set(held) - would), sorted(would - set(held)), sorted(set(keys) - set(held)))
        assert not list(s3.list_objects(bucket, prefix=prefix, recursive=True))
        run_lake("restore-path", table, "--at", at.isoformat())

        assert lake_sql(f"SELECT * FROM {table} ORDER BY id") == before
        again = run_lake("restore-path", table, "--at", at.isoformat())
        assert "0 object(s) changed" in again.stderr, again.stderr
    finally:
        run_lake("sql", "-e", f"DROP TABLE IF EXISTS {table}", check=False)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-v"]))
