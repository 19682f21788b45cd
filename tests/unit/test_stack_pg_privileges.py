"""PostgreSQL least privilege as rendered by the stack: pg_hba lines and the grant/owner SQL (no server)."""

from __future__ import annotations

from pathlib import Path

import pytest
from psycopg2 import sql

from spark_jobs.settings import Settings, load_settings
from spark_jobs.stack import postgres
from spark_jobs.stack.configs import template_values
from spark_jobs.stack.errors import StackError
from spark_jobs.stack.services import airflow_env
from spark_jobs.stack.templates import render_template

HIVE_SITE = Path(__file__).resolve().parents[2] / "infra" / "conf" / "hive" / "hive-site.xml"


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return load_settings({"LAKE_STATE_DIR": str(tmp_path / "state"), "LAKE_HOST": "127.0.0.4",
                          "LAKE_PG_PASSWORD": "adminPw", "LAKE_CDC_PASSWORD": "cdcPw",
                          "LAKE_PG_AIRFLOW_PASSWORD": "airflowPw", "LAKE_PG_METASTORE_PASSWORD": "metastorePw",
                          "LAKE_PG_APP_PASSWORD": "appPw"})


def _text(query: sql.Composable) -> str:
    """The statement as the server receives it. psycopg2 quotes only on a live connection, which unit tests lack:
    here an identifier is quoted as PostgreSQL's quote_ident does (double quotes, an inner one doubled)."""
    if isinstance(query, sql.Composed):
        return "".join(_text(part) for part in query.seq)
    if isinstance(query, sql.SQL):
        return query.string
    if isinstance(query, sql.Identifier):
        return ".".join('"' + s.replace('"', '""') + '"' for s in query.strings)
    raise TypeError(f"unexpected {query!r}")


def _texts(queries: list[sql.Composed]) -> list[str]:
    return [_text(q) for q in queries]


def _hba_rows(text: str) -> list[list[str]]:
    return [line.split() for line in text.splitlines() if line.strip() and not line.startswith("#")]


def test_hba_names_each_role_with_its_one_database_and_scram_only(settings: Settings) -> None:
    rows = _hba_rows(postgres.pg_hba_text(settings))
    assert rows[0] == ["local", "all", "lake_admin", "scram-sha-256"]
    assert all(r[-1] == "scram-sha-256" for r in rows)
    host_rows = {(r[1], r[2], r[3]) for r in rows if r[0] == "host"}
    for addr in ("127.0.0.1/32", "127.0.0.4/32"):
        assert host_rows >= {("all", "lake_admin", addr), ("shop", "lake_cdc", addr), ("shop", "lake_app", addr),
                             ("airflow", "lake_airflow", addr), ("metastore", "lake_metastore", addr)}
    assert len(host_rows) == 10
    # Nobody but the admin has "all"; no physical replication line (base backups), no trust/md5, no "all" user.
    assert {r[2] for r in rows if r[1] == "all"} == {"lake_admin"}
    assert not [r for r in rows if r[1] == "replication" or r[2] == "all"]


@pytest.mark.parametrize(("host", "expected"), [
    ("127.0.0.1", ["127.0.0.1/32"]),
    ("127.0.0.4", ["127.0.0.1/32", "127.0.0.4/32"]),
    ("::1", ["::1/128"]),
    ("[::1]", ["::1/128"]),
    ("localhost", ["127.0.0.1/32", "::1/128"]),
    ("10.1.2.3", ["10.1.2.3/32"]),
    ("db.internal", ["samehost"]),
])
def test_hba_addresses_are_this_machines_only(host: str, expected: list[str]) -> None:
    assert postgres.hba_addresses(host) == expected


def test_roles_are_never_superusers_and_only_cdc_replicates() -> None:
    cdc = _text(postgres.role_sql("lake_cdc", exists=False, replication=True))
    assert cdc == ('CREATE ROLE "lake_cdc" WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS REPLICATION '
                   "PASSWORD %s")
    app = _text(postgres.role_sql("lake_app", exists=True, replication=False))
    assert app.startswith('ALTER ROLE "lake_app" WITH LOGIN NOSUPERUSER') and " NOREPLICATION " in app
    with pytest.raises(StackError, match="alphanumeric"):
        postgres.role_sql('x"; DROP ROLE y; --', exists=False, replication=False)
    # The name is an identifier psycopg2 quotes on the connection, not text spliced into the statement.
    assert sql.Identifier("lake_cdc") in postgres.role_sql("lake_cdc", exists=False, replication=True).seq


def test_databases_get_their_owners_and_public_connects_nowhere(settings: Settings) -> None:
    stmts = _texts(postgres.database_privilege_sql(settings))
    assert 'ALTER DATABASE "airflow" OWNER TO "lake_airflow"' in stmts
    assert 'ALTER DATABASE "metastore" OWNER TO "lake_metastore"' in stmts
    for db in ("shop", "airflow", "metastore"):
        assert f'REVOKE ALL ON DATABASE "{db}" FROM PUBLIC' in stmts
    # The CDC role loses the CREATE older installations granted, then gets CONNECT back, nothing else.
    assert stmts.index('REVOKE ALL ON DATABASE "shop" FROM "lake_cdc"') < stmts.index(
        'GRANT CONNECT ON DATABASE "shop" TO "lake_cdc", "lake_app"')
    assert not [s for s in stmts if s.startswith("GRANT") and ("CREATE" in s or "ALL" in s)]


def test_the_app_role_gets_dml_on_the_captured_tables_and_creates_nothing(settings: Settings) -> None:
    stmts = _texts(postgres.shop_privilege_sql(settings, ["customers", "orders"]))
    assert 'GRANT SELECT, INSERT, UPDATE, DELETE ON public."customers", public."orders" TO "lake_app"' in stmts
    assert 'REVOKE CREATE ON SCHEMA public FROM "lake_cdc", "lake_app"' in stmts
    assert not [s for s in stmts if s.startswith("GRANT") and "CREATE" in s]


def test_owner_transfer_names_each_object_kind() -> None:
    owned = [("SCHEMA", "extra"), ("r", "public.dag_run"), ("S", "public.free_seq"), ("v", "public.v"),
             ("m", "public.mv"), ("TYPE", "public.state_enum"), ("DOMAIN", "public.d"),
             ("ROUTINE", "public.f(integer)")]
    assert _texts(postgres.owner_transfer_sql(owned, "lake_airflow")) == [
        'ALTER SCHEMA extra OWNER TO "lake_airflow"',
        'ALTER TABLE public.dag_run OWNER TO "lake_airflow"',
        'ALTER SEQUENCE public.free_seq OWNER TO "lake_airflow"',
        'ALTER VIEW public.v OWNER TO "lake_airflow"',
        'ALTER MATERIALIZED VIEW public.mv OWNER TO "lake_airflow"',
        'ALTER TYPE public.state_enum OWNER TO "lake_airflow"',
        'ALTER DOMAIN public.d OWNER TO "lake_airflow"',
        'ALTER ROUTINE public.f(integer) OWNER TO "lake_airflow"',
    ]


def test_airflow_and_the_metastore_connect_as_their_own_roles(settings: Settings) -> None:
    conn = airflow_env(settings)["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
    assert conn.startswith("postgresql+psycopg2://lake_airflow:airflowPw@127.0.0.4:")
    hive = render_template(HIVE_SITE.read_text(encoding="utf-8"), template_values(settings))
    assert "<value>lake_metastore</value>" in hive and "<value>metastorePw</value>" in hive
    assert "lake_admin" not in hive and "adminPw" not in hive


def test_the_lakes_own_connections_use_the_app_role(settings: Settings) -> None:
    dsn = settings.pg_app_dsn()
    assert "user=lake_app password=appPw" in dsn and "dbname=shop" in dsn
