"""kafka_topics.partition_offsets: both ends of every partition from the admin client's ListOffsets, no consumer
group (a consumer's closing group coordinator printed a librdkafka SASL error on every `lake stream wait`)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest

from spark_jobs.kafka_topics import partition_offsets
from spark_jobs.settings import load_settings


class FakeAdmin:
    """The two admin calls partition_offsets makes, over a broker holding ``topics`` (name -> partition ends)."""

    made: ClassVar[list[FakeAdmin]] = []

    def __init__(self, conf: dict[str, Any]) -> None:
        self.conf = conf
        self.asked: list[tuple[str, list[tuple[str, int]]]] = []
        FakeAdmin.made.append(self)

    topics: ClassVar[dict[str, dict[int, tuple[int, int]]]] = {"a": {0: (3, 10), 1: (0, 0)}, "b": {0: (5, 7)}}

    def list_topics(self, timeout: float) -> Any:
        return SimpleNamespace(topics={t: SimpleNamespace(partitions=dict.fromkeys(ps)) for t, ps in self.topics.items()})

    def list_offsets(self, specs: dict[Any, Any], request_timeout: float) -> dict[Any, Any]:
        kind = {repr(spec) for spec in specs.values()}
        assert len(kind) == 1, "one spec per request"
        end = 0 if "arliest" in kind.pop() else 1
        self.asked.append(("earliest" if end == 0 else "latest", sorted((tp.topic, tp.partition) for tp in specs)))
        out = {}
        for tp in specs:
            value = self.topics[tp.topic][tp.partition][end]
            out[tp] = SimpleNamespace(result=lambda _t, v=value: SimpleNamespace(offset=v))
        return out


def test_both_ends_of_every_existing_partition_without_a_consumer_group(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import confluent_kafka.admin

    monkeypatch.setattr(confluent_kafka.admin, "AdminClient", FakeAdmin)
    FakeAdmin.made.clear()
    settings = load_settings({"LAKE_STATE_DIR": str(tmp_path), "LAKE_KAFKA_TOOLS_PASSWORD": "toolsPw0123"})
    got = partition_offsets(settings, ["a", "missing", "b", "a"])
    assert got == {("a", 0): (3, 10), ("a", 1): (0, 0), ("b", 0): (5, 7)}
    (admin,) = FakeAdmin.made
    assert "group.id" not in admin.conf
    everything = [("a", 0), ("a", 1), ("b", 0)]
    assert admin.asked == [("earliest", everything), ("latest", everything)]
    assert partition_offsets(settings, ["missing"]) == {}
