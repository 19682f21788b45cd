"""The services' configuration files, rendered from the templates in ``infra/conf`` into ``<state>/conf`` on every
``lake stack up`` (so a changed setting takes effect at the next start), and the secret files beside them."""

from __future__ import annotations

from pathlib import Path

from spark_jobs import kafka_auth
from spark_jobs.session import spark_conf_dir, spark_defaults_text, write_private
from spark_jobs.settings import Settings
from spark_jobs.stack.postgres import pg_dirs
from spark_jobs.stack.templates import TEMPLATES, render_template


def template_values(settings: Settings) -> dict[str, str]:
    return {
        "HOST": settings.host,
        "HOST_URL": f"[{settings.host}]" if ":" in settings.host else settings.host,
        "PG_PORT": str(settings.pg_port),
        "PG_SOCKET_DIR": str(pg_dirs(settings)[1]),
        "PG_HOST": settings.pg_host,
        "METASTORE_DB_USER": settings.pg_metastore_user,  # owner of the metastore database, not a superuser
        "METASTORE_DB_PASSWORD": settings.pg_metastore_password,
        "METASTORE_DB": settings.metastore_db,
        "WAREHOUSE": settings.warehouse_uri,
        "S3_ENDPOINT": settings.s3_endpoint,
        "S3_REGION": settings.s3_region,
        "S3_ACCESS_KEY": settings.s3_access_key,
        "S3_SECRET_KEY": settings.s3_secret_key,
        "KAFKA_PORT": str(settings.kafka_port),
        "KAFKA_CONTROLLER_PORT": str(settings.kafka_controller_port),
        "KAFKA_DATA_DIR": str(settings.data_dir / "kafka"),
        "KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
        "KAFKA_CDC_RETENTION_MS": str(settings.kafka_cdc_retention_ms),
        "KAFKA_CDC_RETENTION_BYTES": str(settings.kafka_cdc_retention_bytes),
        "KAFKA_CDC_MIN_COMPACTION_LAG_MS": str(settings.kafka_cdc_min_compaction_lag_ms),
        "KAFKA_TOPIC_PARTITIONS": str(settings.kafka_topic_partitions),
        "CONNECT_PORT": str(settings.connect_port),
        "PLUGIN_PATH": str(settings.cache_dir / "jars" / "debezium"),
        "SECRETS_DIR": str(settings.state_dir / "secrets"),
        **kafka_auth.server_template_values(settings),
        "CONNECT_REST_USERS_FILE": str(kafka_auth.connect_rest_users_path(settings)),
    }


def render_configs(settings: Settings) -> None:
    """Render every template into ``<state>/conf`` (private files: some hold secrets)."""
    values = template_values(settings)
    for src in sorted(TEMPLATES.rglob("*")):
        if src.is_file():
            dst = settings.conf_dir / src.relative_to(TEMPLATES)
            write_private(dst, render_template(src.read_text(encoding="utf-8"), values))
    write_private(spark_conf_dir(settings) / "spark-defaults.conf", spark_defaults_text(settings))
    # Connect reads credentials through its FileConfigProvider from here.
    write_private(settings.state_dir / "secrets" / "postgres.properties",
                  f"cdc.user={settings.cdc_user}\ncdc.password={settings.cdc_password}\n")
    for path, text in kafka_auth.connect_secret_files(settings).items():
        write_private(path, text)
    write_private(thrift_users_path(settings), f"{THRIFT_USER}={settings.thrift_password}\n")
    write_private(thrift_password_path(settings), settings.thrift_password)


#: The Thrift server's (JDBC) user; its password is ``LAKE_THRIFT_PASSWORD``.
THRIFT_USER = "lake"


def thrift_users_path(settings: Settings) -> Path:
    """``user=password`` lines that ``infra/thrift/LakeThriftAuth.java`` checks logins against (0600)."""
    return settings.state_dir / "secrets" / "thrift-users.properties"


def thrift_password_path(settings: Settings) -> Path:
    """The password alone (0600), for ``beeline -w <file>``: no password on a command line."""
    return settings.state_dir / "secrets" / "thrift-password"
