"""Who may do what on the lake's Kafka: SASL/SCRAM principals, their ACLs, and their client settings.

The broker has one listener for clients, ``SASL_PLAINTEXT``, and the standard authorizer with
``allow.everyone.if.no.acl.found=false``: a connection without credentials is refused at the handshake, and
an authenticated principal may do only what :data:`ACLS` grants it. One principal per kind of client:

- ``lake_connect``: the Kafka Connect worker and Debezium (its own internal topics, writes the CDC topics);
- ``lake_stream``: the streaming app (reads the CDC topics and ``events.clickstream``, nothing else);
- ``lake_producer``: applications publishing events (writes ``events.*``, reads nothing);
- ``lake_tools``: the operator's tools (``lake stack up`` creating topics and setting retention, the health
  probe, ``lake stream status`` lag, benches, tests): a super user, since administration is its job.

The broker itself authenticates as ``lake_broker`` with SASL/PLAIN on its controller and inter-broker
connections (KRaft cannot bootstrap SCRAM on the controller listener); that principal also upserts the
SCRAM credentials and ACLs at every ``lake stack up`` (:func:`ensure_principals`), so a new password in the
state dir's ``.env`` or a new ACL takes effect on the next ``up``. Passwords are generated per state dir
(``LAKE_KAFKA_*_PASSWORD``) and reach the JVMs through 0600 files only, never a command line.

Kafka Connect's REST API takes HTTP basic auth (Kafka's ``BasicAuthSecurityRestExtension``): one user,
:data:`CONNECT_REST_USER`, with ``LAKE_CONNECT_REST_PASSWORD``; the worker reads it from a 0600 file.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from spark_jobs.settings import Settings

Principal = Literal["broker", "tools", "connect", "stream", "producer"]

#: Kafka user name of each principal; the password is ``settings.kafka_<principal>_password``.
USERS: dict[str, str] = {p: f"lake_{p}" for p in ("broker", "tools", "connect", "stream", "producer")}
#: Principals allowed everything (the broker's own and the operator's tools).
SUPER_USERS: tuple[Principal, ...] = ("broker", "tools")
SCRAM_MECHANISM = "SCRAM-SHA-512"
SCRAM_ITERATIONS = 8192
SECURITY_PROTOCOL = "SASL_PLAINTEXT"

#: Connect's group and internal topics (``infra/conf/connect/worker.properties``), Debezium's topic prefix.
CONNECT_GROUP = "lakestream-connect"
CONNECT_TOPIC_PREFIX = "lakestream-connect-"
CDC_TOPIC_PREFIX = "shop."
CDC_HEARTBEAT_TOPIC_PREFIX = "__debezium-heartbeat.shop"
EVENTS_TOPIC_PREFIX = "events."
#: Spark's Kafka source names its consumer groups ``spark-kafka-source-<uuid>...``.
SPARK_GROUP_PREFIX = "spark-kafka-source-"


@dataclass(frozen=True)
class Acl:
    """One ALLOW rule: ``principal`` may do ``operations`` on ``resource`` (a topic or a consumer group)."""

    principal: Principal
    resource: Literal["topic", "group"]
    name: str
    prefixed: bool
    operations: tuple[str, ...]


ACLS: tuple[Acl, ...] = (
    # Connect worker: its config/offset/status topics and group; Debezium writes (and creates) the CDC and
    # heartbeat topics. Idempotent producers need only Write on the topic (Kafka >= 2.8).
    Acl("connect", "topic", CONNECT_TOPIC_PREFIX, True, ("ALL",)),
    Acl("connect", "group", CONNECT_GROUP, False, ("READ", "DESCRIBE")),
    Acl("connect", "topic", CDC_TOPIC_PREFIX, True, ("WRITE", "DESCRIBE", "CREATE", "DESCRIBE_CONFIGS")),
    Acl("connect", "topic", CDC_HEARTBEAT_TOPIC_PREFIX, True, ("WRITE", "DESCRIBE", "CREATE", "DESCRIBE_CONFIGS")),
    # Streaming app: reads its inputs (offsets through the admin API: Describe), joins Spark's groups.
    Acl("stream", "topic", f"{CDC_TOPIC_PREFIX}public.", True, ("READ", "DESCRIBE")),
    Acl("stream", "topic", "events.clickstream", False, ("READ", "DESCRIBE")),
    Acl("stream", "group", SPARK_GROUP_PREFIX, True, ("READ", "DESCRIBE")),
    # Event producers: write events topics, nothing else.
    Acl("producer", "topic", EVENTS_TOPIC_PREFIX, True, ("WRITE", "DESCRIBE")),
)


def user(principal: Principal) -> str:
    return USERS[principal]


def password(settings: Settings, principal: Principal) -> str:
    value = str(getattr(settings, f"kafka_{principal}_password"))
    if not value:
        raise ValueError(f"LAKE_KAFKA_{principal.upper()}_PASSWORD is empty; `lake stack up` generates it into "
                         f"{settings.state_dir / '.env'}")
    return value


def jaas(settings: Settings, principal: Principal, module: str = "scram.ScramLoginModule") -> str:
    """A JAAS line for a Java client (Connect, Spark's Kafka source). Holds a password: keep it private."""
    return (f'org.apache.kafka.common.security.{module} required '
            f'username="{user(principal)}" password="{password(settings, principal)}";')


def client_conf(settings: Settings, principal: Principal) -> dict[str, Any]:
    """librdkafka (confluent-kafka) settings to connect as ``principal``."""
    mechanism = "PLAIN" if principal == "broker" else SCRAM_MECHANISM
    return {"bootstrap.servers": settings.kafka_bootstrap, "security.protocol": SECURITY_PROTOCOL,
            "sasl.mechanisms": mechanism, "sasl.username": user(principal),
            "sasl.password": password(settings, principal)}


def spark_source_options(settings: Settings) -> dict[str, str]:
    """Options of Spark's Kafka source for the streaming app (principal ``lake_stream``).

    The JAAS line travels with the query's options (to the executors too), never a command line; its option
    name matches ``spark.sql.redaction.options.regex`` (:mod:`spark_jobs.session`), so plans print it redacted.
    """
    return {"kafka.bootstrap.servers": settings.kafka_bootstrap,
            "kafka.security.protocol": SECURITY_PROTOCOL,
            "kafka.sasl.mechanism": SCRAM_MECHANISM,
            "kafka.sasl.jaas.config": jaas(settings, "stream")}


def server_template_values(settings: Settings) -> dict[str, str]:
    """Values for ``infra/conf/kafka/server.properties`` and ``infra/conf/connect/worker.properties``."""
    return {
        "KAFKA_BROKER_USER": user("broker"),
        "KAFKA_BROKER_PASSWORD": settings.kafka_broker_password,
        "KAFKA_SUPER_USERS": ";".join(f"User:{user(p)}" for p in SUPER_USERS),
        "KAFKA_CONNECT_JAAS": jaas(settings, "connect") if settings.kafka_connect_password else "",
    }


def acl_bindings(acls: tuple[Acl, ...]) -> list[Any]:
    """``acls`` as confluent-kafka ``AclBinding`` objects, one per operation."""
    from confluent_kafka.admin import (  # type: ignore[attr-defined]  # public API the stubs do not re-export
        AclBinding,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    out = []
    for acl in acls:
        for op in acl.operations:
            out.append(AclBinding(ResourceType[acl.resource.upper()], acl.name,
                                  ResourcePatternType.PREFIXED if acl.prefixed else ResourcePatternType.LITERAL,
                                  f"User:{user(acl.principal)}", "*", AclOperation[op],
                                  AclPermissionType.ALLOW))
    return out


def ensure_principals(settings: Settings, timeout: float = 30.0) -> None:
    """Upsert every client principal's SCRAM credentials and create :data:`ACLS` (idempotent), as the broker.

    Raises ``KafkaException`` while the broker is not ready (the caller retries until its deadline).
    """
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    # log_level 0: while the broker starts, every retry would print librdkafka connection errors; the last
    # exception reaches the caller, which names the service and its log.
    admin = AdminClient({**client_conf(settings, "broker"), "client.id": "lake-bootstrap", "log_level": 0})
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, SCRAM_ITERATIONS)
    upserts: list[Any] = [UserScramCredentialUpsertion(user(p), info, password(settings, p).encode())
               for p in ("tools", "connect", "stream", "producer")]
    for fut in admin.alter_user_scram_credentials(upserts, request_timeout=timeout).values():
        fut.result()
    for fut in admin.create_acls(acl_bindings(ACLS), request_timeout=timeout).values():
        fut.result()


# ---------------------------------------------------------------- Connect REST

CONNECT_REST_USER = "lake"


def connect_rest_headers(settings: Settings) -> dict[str, str]:
    """The ``Authorization`` header of every call to Connect's REST API."""
    token = base64.b64encode(f"{CONNECT_REST_USER}:{settings.connect_rest_password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


def connect_rest_users_path(settings: Settings) -> Path:
    """The worker's user file (``PropertyFileLoginModule``: ``user: password`` lines); 0600."""
    return settings.state_dir / "secrets" / "connect-rest-users.properties"


def connect_curl_config_path(settings: Settings) -> Path:
    """A 0600 curl config with the REST credentials, so the hints we print hold no password (``curl -K``)."""
    return settings.state_dir / "secrets" / "connect-rest.curl"


def connect_curl(settings: Settings) -> str:
    """``curl -K <config>``: the start of every Connect REST command we suggest to a user."""
    return f"curl -K {connect_curl_config_path(settings)}"


def connect_secret_files(settings: Settings) -> dict[Path, str]:
    """The private files that hold Connect's REST credentials, with their text."""
    password = settings.connect_rest_password
    return {connect_rest_users_path(settings): f"{CONNECT_REST_USER}: {password}\n",
            connect_curl_config_path(settings): f'user = "{CONNECT_REST_USER}:{password}"\n'}
