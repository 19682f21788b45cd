"""Kafka security configuration: SASL on every listener, the authorizer on, one principal per client kind with
only its job's ACLs, credentials in private files and client settings, never on a command line."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from spark_jobs import kafka_auth
from spark_jobs.settings import SECRET_NAMES, Settings, load_settings
from spark_jobs.stack import services, templates
from spark_jobs.stack.configs import template_values
from spark_jobs.stack.templates import render_template

PASSWORDS = {f"LAKE_KAFKA_{p.upper()}_PASSWORD": f"pw{p.capitalize()}0123456789" for p in kafka_auth.USERS}
PASSWORDS["LAKE_CONNECT_REST_PASSWORD"] = "pwConnectRest0123456789"


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return load_settings({"LAKE_STATE_DIR": str(tmp_path / "state"), **PASSWORDS})


def _props(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip()
    return out


def _rendered(settings: Settings, name: str) -> dict[str, str]:
    return _props(render_template((Path(templates.TEMPLATES) / name).read_text(), template_values(settings)))


def test_every_kafka_password_is_a_generated_secret() -> None:
    assert {f"kafka_{p}_password" for p in kafka_auth.USERS} <= set(SECRET_NAMES)


def test_the_broker_has_no_anonymous_listener_and_denies_without_an_acl(settings: Settings) -> None:
    props = _rendered(settings, "kafka/server.properties")
    assert "PLAINTEXT://" not in props["listeners"].replace("SASL_PLAINTEXT://", "")
    assert set(props["listener.security.protocol.map"].split(",")) == {"SASL_PLAINTEXT:SASL_PLAINTEXT",
                                                                        "CONTROLLER:SASL_PLAINTEXT"}
    assert props["authorizer.class.name"] == "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
    assert props["allow.everyone.if.no.acl.found"] == "false"
    assert props["auto.create.topics.enable"] == "false"
    assert props["super.users"] == "User:lake_broker;User:lake_tools"
    # SCRAM for clients, PLAIN only where the broker's own principal logs in, and it knows only that user.
    assert props["listener.name.sasl_plaintext.sasl.enabled.mechanisms"] == "SCRAM-SHA-512,PLAIN"
    plain = props["listener.name.sasl_plaintext.plain.sasl.jaas.config"]
    assert 'user_lake_broker="pwBroker0123456789"' in plain and plain.count("user_") == 1


def test_connect_logs_in_as_its_own_principal_for_every_client(settings: Settings) -> None:
    props = _rendered(settings, "connect/worker.properties")
    for prefix in ("", "producer.", "consumer.", "admin."):
        assert props[f"{prefix}security.protocol"] == "SASL_PLAINTEXT"
        assert props[f"{prefix}sasl.mechanism"] == "SCRAM-SHA-512"
        assert 'username="lake_connect" password="pwConnect0123456789"' in props[f"{prefix}sasl.jaas.config"]


def test_no_kafka_or_connect_password_on_a_supervised_command_line(settings: Settings) -> None:
    commands = " ".join(" ".join(p.command) for s in services.services(settings) for p in s.programs)
    for value in PASSWORDS.values():
        assert value not in commands


def test_client_settings_name_the_principal(settings: Settings) -> None:
    conf = kafka_auth.client_conf(settings, "producer")
    assert conf["sasl.username"] == "lake_producer" and conf["sasl.password"] == "pwProducer0123456789"
    assert conf["security.protocol"] == "SASL_PLAINTEXT" and conf["sasl.mechanisms"] == "SCRAM-SHA-512"
    assert kafka_auth.client_conf(settings, "broker")["sasl.mechanisms"] == "PLAIN"
    options = kafka_auth.spark_source_options(settings)
    assert 'username="lake_stream" password="pwStream0123456789"' in options["kafka.sasl.jaas.config"]


def test_an_empty_password_names_the_setting_and_the_fix(tmp_path: Path) -> None:
    bare = load_settings({"LAKE_STATE_DIR": str(tmp_path / "s")})
    with pytest.raises(ValueError, match="LAKE_KAFKA_STREAM_PASSWORD is empty; `lake stack up` generates it"):
        kafka_auth.client_conf(bare, "stream")


def _grants(principal: str) -> set[tuple[str, str, bool, str]]:
    return {(a.resource, a.name, a.prefixed, op) for a in kafka_auth.ACLS if a.principal == principal
            for op in a.operations}


def test_only_connect_writes_cdc_topics_and_only_producers_write_events() -> None:
    writers = {(a.principal, a.name) for a in kafka_auth.ACLS if a.resource == "topic"
               and {"WRITE", "ALL"} & set(a.operations)}
    assert writers == {("connect", "lakestream-connect-"), ("connect", "shop."),
                       ("connect", "__debezium-heartbeat.shop"), ("producer", "events.")}


def test_the_stream_reads_its_inputs_and_nothing_else() -> None:
    assert _grants("stream") == {("topic", "shop.public.", True, "READ"), ("topic", "shop.public.", True, "DESCRIBE"),
                                 ("topic", "events.clickstream", False, "READ"),
                                 ("topic", "events.clickstream", False, "DESCRIBE"),
                                 ("group", "spark-kafka-source-", True, "READ"),
                                 ("group", "spark-kafka-source-", True, "DESCRIBE")}


def test_no_acl_is_for_a_super_user_and_every_operation_exists() -> None:
    from confluent_kafka.admin import AclOperation  # type: ignore[attr-defined]

    assert not {a.principal for a in kafka_auth.ACLS} & set(kafka_auth.SUPER_USERS)
    assert len(kafka_auth.acl_bindings(kafka_auth.ACLS)) == sum(len(a.operations) for a in kafka_auth.ACLS)
    for acl in kafka_auth.ACLS:
        for op in acl.operations:
            assert op in AclOperation.__members__


def test_connect_rest_requires_basic_auth_from_a_private_file(settings: Settings) -> None:
    from spark_jobs.stack.configs import render_configs

    props = _rendered(settings, "connect/worker.properties")
    assert props["rest.extension.classes"] == \
        "org.apache.kafka.connect.rest.basic.auth.extension.BasicAuthSecurityRestExtension"
    connect = next(p for s in services.services(settings) for p in s.programs if p.name == "connect")
    jaas_arg = next(a for a in connect.command if a.startswith("-Djava.security.auth.login.config="))
    render_configs(settings)
    jaas_text = Path(jaas_arg.split("=", 1)[1]).read_text()
    users = kafka_auth.connect_rest_users_path(settings)
    assert f'file="{users}"' in jaas_text
    assert users.read_text() == "lake: pwConnectRest0123456789\n"
    assert users.stat().st_mode & 0o077 == 0 and kafka_auth.connect_curl_config_path(settings).stat().st_mode & 0o077 == 0
    assert kafka_auth.connect_rest_headers(settings) == {
        "Authorization": "Basic " + base64.b64encode(b"lake:pwConnectRest0123456789").decode()}
    # The hints we print call curl with the private config, never with the password.
    assert kafka_auth.connect_curl(settings) == f"curl -K {kafka_auth.connect_curl_config_path(settings)}"
