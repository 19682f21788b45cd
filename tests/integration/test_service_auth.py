"""Kafka, Connect, the Thrift server and the Data Docs on the real stack refuse what a client may not do (issue 20,
item 4; issue 32, item 7).

Each attempt writes one record and then reads the topic's end offsets as ``lake_tools``: a refusal must show
as a delivery error *and* an unchanged topic, so a record that slipped through fails the test even if the
client reported an error.
"""

from __future__ import annotations

import functools
import uuid
from typing import Any

import pytest

from spark_jobs import kafka_auth
from spark_jobs.contracts.clickstream import TOPIC as EVENTS_TOPIC
from spark_jobs.settings import Settings
from tests.integration.lakehelpers import beeline, wait_until

CDC_TOPIC = "shop.public.orders"


def _end_offsets(settings: Settings, topic: str) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**kafka_auth.client_conf(settings, "tools"), "group.id": f"_it_{uuid.uuid4().hex}"})
    try:
        meta = consumer.list_topics(topic, timeout=15).topics[topic]
        assert meta.error is None, f"{topic}: {meta.error}"
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=15)[1] for p in meta.partitions}
    finally:
        consumer.close()


def _produce(conf: dict[str, Any], topic: str) -> str | None:
    """Produce one forged record; the delivery error's text, or None if the broker took it."""
    from confluent_kafka import Producer

    producer = Producer({**conf, "message.timeout.ms": 8000, "socket.timeout.ms": 5000, "retries": 0,
                         "enable.idempotence": False})
    result: list[Any] = []
    producer.produce(topic, key=b'{"id":-1}', value=b'{"op":"d","forged":true}',
                     on_delivery=lambda err, _msg: result.append(err))
    producer.flush(20)
    assert result, f"no delivery report for the forged record to {topic} within 20 s"
    return None if result[0] is None else str(result[0])


@pytest.fixture(scope="module")
def topics(stack: Settings) -> Settings:
    """The stack with the CDC and events topics present (the connector has made the CDC ones)."""
    from spark_jobs.stack.connectors import apply

    apply(stack)

    def present(topic: str) -> bool:
        try:
            _end_offsets(stack, topic)
        except (AssertionError, KeyError):
            return False
        return True

    for topic in (CDC_TOPIC, EVENTS_TOPIC):
        wait_until(functools.partial(present, topic), f"topic {topic} at {stack.kafka_bootstrap}", 120, every=2)
    return stack


@pytest.mark.parametrize(("who", "topic", "expected"), [
    ("anonymous", CDC_TOPIC, "timed out"),  # no SASL handshake: the broker drops the connection
    ("wrong password", CDC_TOPIC, "timed out"),
    ("producer", CDC_TOPIC, "TOPIC_AUTHORIZATION_FAILED"),
    ("stream", EVENTS_TOPIC, "TOPIC_AUTHORIZATION_FAILED"),
    ("stream", CDC_TOPIC, "TOPIC_AUTHORIZATION_FAILED"),
])
def test_a_client_outside_its_acl_cannot_write_a_lake_topic(topics: Settings, who: str, topic: str,
                                                            expected: str) -> None:
    if who == "anonymous":
        conf: dict[str, Any] = {"bootstrap.servers": topics.kafka_bootstrap}
    elif who == "wrong password":
        conf = {**kafka_auth.client_conf(topics, "connect"), "sasl.password": "not-the-password"}
    else:
        conf = kafka_auth.client_conf(topics, who)  # type: ignore[arg-type]
    before = _end_offsets(topics, topic)
    error = _produce(conf, topic)
    assert error is not None, f"{who} wrote a forged record to {topic}"
    assert expected.lower() in error.lower() or "authorization" in error.lower(), f"{who} -> {topic}: {error}"
    assert _end_offsets(topics, topic) == before, f"{topic} grew after {who}'s refused write"


def test_the_producer_writes_events_but_cannot_read_them(topics: Settings) -> None:
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    # A well-formed write of the producer principal lands (the forged key/value is not a valid event, which
    # the stream will quarantine: so write to the producers' own prefix, on a topic made for this test).
    from spark_jobs.loadgen.producer import ensure_topic

    topic = f"events.it-acl-{uuid.uuid4().hex[:8]}"
    ensure_topic(topics, topic, partitions=1)
    try:
        assert _produce(kafka_auth.client_conf(topics, "producer"), topic) is None
        assert sum(_end_offsets(topics, topic).values()) == 1
        consumer = Consumer({**kafka_auth.client_conf(topics, "producer"), "group.id": f"_it_{uuid.uuid4().hex}",
                             "enable.auto.commit": False})
        try:
            consumer.assign([TopicPartition(topic, 0, 0)])
            msg = consumer.poll(15)
            assert msg is not None and msg.error() is not None, "the producer principal read an events record"
            assert "authoriz" in str(msg.error()).lower()
        except KafkaException as exc:
            assert "authoriz" in str(exc).lower()
        finally:
            consumer.close()
    finally:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient(kafka_auth.client_conf(topics, "tools"))
        for fut in admin.delete_topics([topic], operation_timeout=30).values():
            fut.result(60)


def test_the_broker_creates_no_topic_on_first_use(topics: Settings) -> None:
    topic = f"it-autocreate-{uuid.uuid4().hex[:8]}"
    error = _produce(kafka_auth.client_conf(topics, "tools"), topic)
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(kafka_auth.client_conf(topics, "tools"))
    assert topic not in admin.list_topics(timeout=15).topics, f"{topic} was auto-created"
    assert error is not None


@pytest.mark.parametrize("credentials", ["none", "wrong password"])
def test_connect_rest_refuses_a_caller_without_the_password(stack: Settings, credentials: str) -> None:
    import base64
    import urllib.error
    import urllib.request

    headers = {} if credentials == "none" else {
        "Authorization": "Basic " + base64.b64encode(f"{kafka_auth.CONNECT_REST_USER}:wrong".encode()).decode()}
    req = urllib.request.Request(f"{stack.connect_url}/connectors", headers=headers)
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(req, timeout=10)
    assert refused.value.code == 401
    from spark_jobs.stack import health

    assert isinstance(health.http_json(f"{stack.connect_url}/connectors",
                                       headers=kafka_auth.connect_rest_headers(stack)), list)


@pytest.mark.parametrize(("user", "password"), [("lake", "wrong"), ("lake", ""), ("nobody", "the real one")])
def test_the_thrift_server_refuses_a_wrong_login(stack: Settings, user: str, password: str, tmp_path: Any) -> None:
    from spark_jobs.stack.configs import thrift_password_path

    given = tmp_path / "pw"
    given.write_text(thrift_password_path(stack).read_text() if password == "the real one" else password)
    proc = beeline(stack, "SELECT 41 + 1 AS answer", user=user, password_file=given)
    assert "42" not in proc.stdout.split(), f"the Thrift server ran a query for {user} with a wrong login"
    assert "Error validating the login" in proc.stdout + proc.stderr, (proc.stdout + proc.stderr)[-2000:]
    # ... while the right login of the same server answers.
    right = beeline(stack, "SELECT 41 + 1 AS answer", user="lake", password_file=thrift_password_path(stack))
    assert right.stdout.split()[-2:] == ["answer", "42"]


@pytest.mark.parametrize("credentials", ["none", "wrong password", "wrong user"])
def test_data_docs_refuse_a_caller_without_the_login(stack: Settings, credentials: str) -> None:
    import httpx

    from spark_jobs.quality import docs, docs_assets

    base = f"http://{stack.host}:{stack.dq_docs_port}"
    auth = {"none": None, "wrong password": (stack.dq_docs_user, "wrong"),
            "wrong user": ("admin", stack.dq_docs_password)}[credentials]
    site = docs.data_docs_dir(stack)
    pages = sorted("/" + p.relative_to(site).as_posix() for p in site.rglob("*.html"))[:50]
    paths = ["/", "/index.html", *pages, docs_assets.BOOTSTRAP.url_path("dist/css/bootstrap.min.css")]
    for path in paths:
        refused = httpx.get(base + path, auth=auth, timeout=10)
        assert refused.status_code == 401 and refused.headers["WWW-Authenticate"].startswith("Basic"), path
        assert "<html" not in refused.text.lower(), path
    # ... while the right login gets every page, with no asset from another machine.
    right = (stack.dq_docs_user, stack.dq_docs_password)
    for path in paths:
        page = httpx.get(base + path, auth=right, timeout=10)
        assert page.status_code == 200, (path, page.status_code)
        if path.endswith((".html", "/")):
            assert docs_assets.external_asset_urls(page.text) == [], path
