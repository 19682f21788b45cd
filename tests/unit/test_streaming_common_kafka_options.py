"""Options the streaming queries give Spark's Kafka source (a recording stand-in for the reader, no Spark)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from spark_jobs.settings import load_settings
from spark_jobs.streaming.common import KAFKA_FETCH_MAX_WAIT_MS, start_kafka_query


class Recorder:
    """Stands in for DataStreamReader/DataFrame/DataStreamWriter: records every option, returns itself."""

    def __init__(self) -> None:
        self.recorded: dict[str, str] = {}

    def __getattr__(self, name: str) -> Any:
        if name == "writeStream":  # a property on a DataFrame
            return self

        def call(*args: Any, **kwargs: Any) -> Recorder:
            if name == "option":
                self.recorded[str(args[0])] = str(args[1])
            elif name == "options":
                self.recorded.update({k: str(v) for k, v in kwargs.items()})
            return self
        return call


class FakeSpark:
    def __init__(self) -> None:
        self.readStream = Recorder()


def _options(tmp_path: Path, **kwargs: Any) -> dict[str, str]:
    settings = load_settings({"LAKE_STATE_DIR": str(tmp_path), "LAKE_KAFKA_STREAM_PASSWORD": "streamPw0123"})
    spark = FakeSpark()
    start_kafka_query(spark, settings, "q", ("subscribe", "t"), 100, 1, lambda df, i: None, **kwargs)  # type: ignore[arg-type]
    return spark.readStream.recorded


def test_backlog_batches_are_split_into_bounded_tasks_when_asked(tmp_path: Path) -> None:
    options = _options(tmp_path, max_records_per_task=10_000)
    assert options["maxRecordsPerPartition"] == "10000"
    assert options["maxOffsetsPerTrigger"] == "100"
    assert options["failOnDataLoss"] == "true"
    assert options["kafka.fetch.max.wait.ms"] == str(KAFKA_FETCH_MAX_WAIT_MS)


def test_without_a_task_bound_one_task_reads_each_topic_partition(tmp_path: Path) -> None:
    assert "maxRecordsPerPartition" not in _options(tmp_path)


def test_the_queries_log_in_to_kafka_as_the_stream_principal(tmp_path: Path) -> None:
    options = _options(tmp_path)
    assert options["kafka.security.protocol"] == "SASL_PLAINTEXT"
    assert options["kafka.sasl.mechanism"] == "SCRAM-SHA-512"
    assert options["kafka.sasl.jaas.config"] == ('org.apache.kafka.common.security.scram.ScramLoginModule required '
                                                 'username="lake_stream" password="streamPw0123";')
