"""PostgreSQL least privilege on the running stack: each role reaches only its database and does only its job."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg2
import pytest
from psycopg2 import errors
from psycopg2.extras import LogicalReplicationConnection, PhysicalReplicationConnection

from spark_jobs.settings import Settings


def _dsn(stack: Settings, db: str, user: str, password: str) -> str:
    return f"host={stack.pg_host} port={stack.pg_port} dbname={db} user={user} password={password}"


def _admin_scalar(stack: Settings, query: str, params: tuple[object, ...] = (), db: str | None = None) -> object:
    with psycopg2.connect(stack.pg_dsn(db)) as conn, conn.cursor() as cur:
        cur.execute(query, params)
        row = cur.fetchone()
    conn.close()
    return row[0] if row else None


def test_cdc_role_replicates_shop_but_cannot_create_there(stack: Settings) -> None:
    conn = psycopg2.connect(_dsn(stack, stack.pg_shop_db, stack.cdc_user, stack.cdc_password))
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT count(*) FROM public.orders")  # what it captures (snapshots) it may read
            for stmt in ("CREATE TABLE public.cdc_probe (x int)", "CREATE SCHEMA cdc_probe",
                         "CREATE PUBLICATION cdc_probe FOR TABLE public.orders",
                         "CREATE TEMP TABLE cdc_probe (x int)"):
                with pytest.raises(errors.InsufficientPrivilege):
                    cur.execute(stmt)
                conn.rollback()
    finally:
        conn.close()
    assert _admin_scalar(stack, "SELECT has_database_privilege(%s, %s, 'CREATE')",
                         (stack.cdc_user, stack.pg_shop_db)) is False
    assert _admin_scalar(stack, "SELECT rolsuper FROM pg_roles WHERE rolname = %s", (stack.cdc_user,)) is False
    # Its logical replication connection (what Debezium opens) is allowed.
    repl = psycopg2.connect(_dsn(stack, stack.pg_shop_db, stack.cdc_user, stack.cdc_password),
                            connection_factory=LogicalReplicationConnection)
    repl.close()


@pytest.mark.parametrize("db", ["airflow", "metastore"])
def test_cdc_and_app_roles_cannot_connect_to_airflow_or_metastore(stack: Settings, db: str) -> None:
    for user, password in ((stack.cdc_user, stack.cdc_password), (stack.pg_app_user, stack.pg_app_password)):
        with pytest.raises(psycopg2.OperationalError, match=r"no pg_hba\.conf entry"):
            psycopg2.connect(_dsn(stack, db, user, password), connect_timeout=5)
        assert _admin_scalar(stack, "SELECT has_database_privilege(%s, %s, 'CONNECT')", (user, db)) is False


@pytest.fixture
def stranger(stack: Settings) -> Iterator[tuple[str, str]]:
    """A login role with no grants at all: what PUBLIC may do."""
    role, password = f"lake_probe_{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    conn = psycopg2.connect(stack.pg_dsn())
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(f'CREATE ROLE "{role}" LOGIN PASSWORD %s', (password,))
    try:
        yield role, password
    finally:
        with conn.cursor() as cur:
            cur.execute(f'DROP ROLE IF EXISTS "{role}"')
        conn.close()


def test_public_connects_to_none_of_the_lake_databases(stack: Settings, stranger: tuple[str, str]) -> None:
    role, password = stranger
    for db in (stack.airflow_db, stack.metastore_db, stack.pg_shop_db):
        with pytest.raises(psycopg2.OperationalError, match=r"no pg_hba\.conf entry"):
            psycopg2.connect(_dsn(stack, db, role, password), connect_timeout=5)
        # Behind pg_hba, the database ACL says the same (PUBLIC has no CONNECT).
        assert _admin_scalar(stack, "SELECT has_database_privilege(%s, %s, 'CONNECT')", (role, db)) is False, db


@pytest.mark.parametrize(("db_attr", "user_attr"), [("airflow_db", "pg_airflow_user"),
                                                     ("metastore_db", "pg_metastore_user")])
def test_airflow_and_metastore_databases_have_non_superuser_owners(stack: Settings, db_attr: str,
                                                                   user_attr: str) -> None:
    db, owner = getattr(stack, db_attr), getattr(stack, user_attr)
    assert _admin_scalar(stack, "SELECT rolsuper FROM pg_roles WHERE rolname = %s", (owner,)) is False
    assert _admin_scalar(stack, "SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = %s",
                         (db,)) == owner
    # The service's tables are its role's, none left to the superuser (migrated installations included).
    assert _admin_scalar(stack, "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                                "WHERE n.nspname = 'public' AND c.relkind IN ('r', 'S', 'v') "
                                "AND pg_get_userbyid(c.relowner) <> %s", (owner,), db=db) == 0
    assert _admin_scalar(stack, "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                                "WHERE n.nspname = 'public' AND c.relkind = 'r'", db=db) != 0
    # Airflow and the metastore really connect as these roles.
    assert _admin_scalar(stack, "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND usename = %s",
                         (db, owner)) != 0
    assert _admin_scalar(stack, "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND usename = %s",
                         (db, stack.pg_superuser)) == 0


def test_app_role_writes_the_shop_tables_and_nothing_else(stack: Settings) -> None:
    conn = psycopg2.connect(stack.pg_app_dsn())
    try:
        with conn.cursor() as cur:
            cur.execute("UPDATE public.customers SET email = email WHERE customer_id = -1")
            for stmt in ("CREATE TABLE public.app_probe (x int)", "SELECT * FROM public.lake_schema_migrations",
                         "ALTER TABLE public.customers ADD COLUMN app_probe int"):
                conn.rollback()
                with pytest.raises(errors.InsufficientPrivilege):
                    cur.execute(stmt)
        conn.rollback()
    finally:
        conn.close()
    with pytest.raises(psycopg2.OperationalError, match="replication"):
        psycopg2.connect(stack.pg_app_dsn(), connection_factory=LogicalReplicationConnection)


@pytest.mark.parametrize("who", ["admin", "cdc"])
def test_physical_replication_is_refused_by_pg_hba(stack: Settings, who: str) -> None:
    """No role may stream the whole cluster (a base backup), not the superuser and not the CDC role."""
    user, password = ((stack.pg_superuser, stack.pg_password) if who == "admin"
                      else (stack.cdc_user, stack.cdc_password))
    with pytest.raises(psycopg2.OperationalError, match=r"no pg_hba\.conf entry for replication connection"):
        psycopg2.connect(_dsn(stack, "postgres", user, password), connection_factory=PhysicalReplicationConnection,
                         connect_timeout=5)


def test_logical_replication_as_a_role_without_replication_is_refused(stack: Settings,
                                                                      stranger: tuple[str, str]) -> None:
    role, password = stranger
    with pytest.raises(psycopg2.OperationalError, match=r"no pg_hba\.conf entry"):
        psycopg2.connect(_dsn(stack, stack.pg_shop_db, role, password), connection_factory=LogicalReplicationConnection,
                         connect_timeout=5)
