"""The lake on a running stack matches the table registry (spark_jobs/contracts/tables.py): every Delta table
under the warehouse is declared there, with the declared partition columns and properties (read from each
table's Delta log with the deltalake package: no Spark application needed)."""

from __future__ import annotations

from deltalake import DeltaTable

from spark_jobs.contracts.tables import REPLAY_PREFIX, TABLES, lake_table
from spark_jobs.settings import Settings
from spark_jobs.stack.health import s3_client
from spark_jobs.table_io import LAYERS
from spark_jobs.table_io.create import properties_to_set
from spark_jobs.table_io.driver import storage_options, table_uri
from tests.integration.lakehelpers import start_streaming, wait_stream, wait_until


def _lake_tables(settings: Settings) -> set[str]:
    """``<layer>.<table>`` for every directory under the warehouse that holds a Delta log."""
    s3 = s3_client(settings)
    prefix = settings.warehouse_uri.removeprefix(f"s3a://{settings.s3_bucket}/").rstrip("/") + "/"
    found = set()
    for layer in LAYERS:
        pages = s3.get_paginator("list_objects_v2").paginate(Bucket=settings.s3_bucket, Prefix=f"{prefix}{layer}/",
                                                             Delimiter="/")
        for page in pages:
            for entry in page.get("CommonPrefixes", []):
                table = entry["Prefix"].rstrip("/").rsplit("/", 1)[1]
                log = s3.list_objects_v2(Bucket=settings.s3_bucket, Prefix=f"{entry['Prefix']}_delta_log/", MaxKeys=1)
                if log.get("KeyCount", 0):
                    found.add(f"{layer}.{table}")
    return found


def test_every_lake_table_is_declared_with_its_layout(stack: Settings) -> None:
    start_streaming()
    wait_stream(600)
    # The queries create their tables as they start; on a fresh stack the events query may still be starting.
    streaming = {t.name for t in TABLES.values() if "streaming app" in t.writer}
    def all_streaming_tables() -> set[str] | None:
        found = _lake_tables(stack)
        return found if streaming <= found else None

    found = wait_until(all_streaming_tables, "the streaming app's tables in the lake", 300, every=5,
                       detail=lambda: f"missing {sorted(streaming - _lake_tables(stack))}")
    undeclared = []
    for name in sorted(found):
        try:
            entry = lake_table(name)
        except KeyError:
            undeclared.append(name)
            continue
        meta = DeltaTable(table_uri(stack, name), storage_options=storage_options(stack)).metadata()
        assert tuple(meta.partition_columns) == entry.partitioned_by, (name, meta.partition_columns)
        # The stream's own rule (table_io.create.properties_to_set): a property its writer turned on for good, e.g.
        # deletion vectors on a silver table past LAKE_CDC_TASK_MERGE_MAX_MB, is not missing.
        missing = properties_to_set(entry.properties, meta.configuration)
        assert not missing, f"{name}: properties {missing} declared but not set ({meta.configuration})"
        # The columns as declared (a silver CDC table, and its replayed shadow, may have gained PostgreSQL's new
        # columns after them).
        columns = [f.name for f in DeltaTable(table_uri(stack, name), storage_options=storage_options(stack))
                   .schema().fields]
        declared = entry.schema.names if entry.schema is not None else columns
        got = columns[:len(declared)] if entry.columns_may_widen or name.startswith(REPLAY_PREFIX) else columns
        assert got == declared, f"{name}: columns {columns}, declared {declared}"
    assert not undeclared, f"tables in the lake but not in spark_jobs/contracts/tables.py: {undeclared}"
