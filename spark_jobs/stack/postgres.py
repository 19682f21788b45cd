"""The stack's PostgreSQL: where its cluster lives, initdb, roles and least privilege, pg_hba, shop migrations."""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import pwd
import subprocess
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from spark_jobs.settings import REPO_ROOT, Settings
from spark_jobs.stack.errors import StackError, run_tool, system_tool
from spark_jobs.stack.templates import render_template
from spark_jobs.stack.tools import pg_bin

if TYPE_CHECKING:
    from psycopg2 import sql

log = logging.getLogger(__name__)


def pg_dirs(settings: Settings) -> tuple[Path, Path]:
    """PostgreSQL's data and socket folders.

    Normally inside the state dir. When we are root, PostgreSQL runs as an
    unprivileged OS user (it refuses root); if that user cannot traverse the
    path to the state dir (a checkout under a 0700 folder), the cluster lives in
    ``/var/lib/lakestream/postgres/<hash of the state dir>`` instead, and we say so.
    """
    default = (settings.data_dir / "postgres", settings.run_dir / "postgres")
    if os.geteuid() != 0 or _traversable(settings.state_dir, settings.pg_os_user):
        return default
    digest = hashlib.sha256(str(settings.state_dir).encode()).hexdigest()[:12]
    base = Path("/var/lib/lakestream/postgres") / digest
    return base / "data", base / "run"


@functools.cache
def _traversable(path: Path, user: str) -> bool:
    import pwd

    try:
        pw = pwd.getpwnam(user)
    except KeyError:
        return True  # created later with default permissions; checked again at initdb
    for parent in [path, *path.parents]:
        if not parent.exists():
            continue
        st = parent.stat()
        if st.st_uid == pw.pw_uid:
            ok = bool(st.st_mode & 0o100)
        elif st.st_gid == pw.pw_gid:
            ok = bool(st.st_mode & 0o010)
        else:
            ok = bool(st.st_mode & 0o001)
        if not ok:
            return False
    return True




def pg_os_user(settings: Settings) -> str | None:
    """The unprivileged OS user PostgreSQL runs as when we are root (it refuses root)."""
    if os.geteuid() != 0:
        return None
    name = settings.pg_os_user
    try:
        pwd.getpwnam(name)
    except KeyError:
        run_tool([system_tool("useradd"), "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
             f"creating system user {name} for PostgreSQL")
    return name


def _chown(path: Path, user: str | None) -> None:
    if user:
        entry = pwd.getpwnam(user)
        os.chown(path, entry.pw_uid, entry.pw_gid, follow_symlinks=False)  # root: never through a link


def _check_traversable(path: Path, user: str) -> None:
    proc = subprocess.run([system_tool("runuser"), "-u", user, "--", "test", "-x", str(path)], check=False)
    if proc.returncode != 0:
        raise StackError(
            f"PostgreSQL runs as OS user '{user}', who cannot reach {path}; "
            f"make its parent folders traversable (chmod o+x) or set LAKE_STATE_DIR elsewhere"
        )


def init_postgres(settings: Settings) -> None:
    user = pg_os_user(settings)
    data, sock = pg_dirs(settings)
    if data != settings.data_dir / "postgres":
        log.info(f"  note: OS user {user} cannot reach {settings.state_dir}; PostgreSQL data goes to {data}")
        data.parent.mkdir(parents=True, exist_ok=True)
        data.parent.chmod(0o755)
    sock.mkdir(parents=True, exist_ok=True)
    _chown(sock, user)
    if (data / "PG_VERSION").exists():
        if write_pg_hba(settings):
            log.info("  postgres  wrote pg_hba.conf (each role only for its database; no physical replication)")
        return
    log.info(f"  initdb {data}")
    data.mkdir(parents=True, exist_ok=True)
    data.chmod(0o700)
    _chown(data, user)
    if user:
        _check_traversable(data, user)
    with tempfile.NamedTemporaryFile("w", dir=settings.run_dir, delete=False) as fh:
        fh.write(settings.pg_password + "\n")
        pwfile = Path(fh.name)
    try:
        _chown(pwfile, user)
        run_tool([pg_bin("initdb"), "-D", str(data), "-U", settings.pg_superuser, f"--pwfile={pwfile}",
              "--auth=scram-sha-256", "--encoding=UTF8", "--locale=C.UTF-8"], "initdb", user=user)
    finally:
        pwfile.unlink(missing_ok=True)
    write_pg_hba(settings)


# Who may do what in PostgreSQL (docs/security.md, PostgreSQL roles). The superuser (LAKE_PG_SUPERUSER) only bootstraps: roles,
# databases, shop migrations, the health probe and tests. Everything else has its own non-superuser role:
#   airflow role    owns the airflow database (Airflow's migrations create and alter its tables)
#   metastore role  owns the metastore database (DataNucleus creates the metastore tables on first use)
#   app role        CONNECT to shop and DML on the captured tables: the stream reads column types of added
#                   columns, the load generators insert/update/delete, `lake verify` reads, `lake connectors
#                   status` reads pg_replication_slots and pg_current_wal_lsn() (both open to every role).
#                   It creates nothing, owns nothing and cannot replicate.
#   CDC role        LOGIN REPLICATION, SELECT on the captured tables, writes the heartbeat row; no CREATE on
#                   shop (the publication is the superuser's, V002, and Debezium runs with
#                   publication.autocreate.mode=disabled). Its replication is logical only: pg_hba has no
#                   physical `replication` line, so nobody can stream a base backup of the cluster.
# PUBLIC may connect to none of airflow, metastore, shop; pg_hba names each role with the one database it uses.

def _roles(settings: Settings) -> list[tuple[str, str, bool]]:
    """(role, password, may replicate) of every non-superuser role the stack creates."""
    return [(settings.cdc_user, settings.cdc_password, True),
            (settings.pg_app_user, settings.pg_app_password, False),
            (settings.pg_airflow_user, settings.pg_airflow_password, False),
            (settings.pg_metastore_user, settings.pg_metastore_password, False)]


def role_sql(role: str, exists: bool, replication: bool) -> sql.Composed:
    """CREATE/ALTER ROLE for one login role (the password is a %s parameter): never superuser, creates nothing."""
    from psycopg2 import sql

    verb = "ALTER" if exists else "CREATE"
    repl = "REPLICATION" if replication else "NOREPLICATION"
    return sql.SQL("{verb} ROLE {role} WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS {repl} "
                   "PASSWORD %s").format(verb=sql.SQL(verb), role=_ident(role), repl=sql.SQL(repl))


def database_privilege_sql(settings: Settings) -> list[sql.Composed]:
    """Owners and CONNECT rights of the three databases (run in any database, idempotent)."""
    from psycopg2 import sql

    shop, cdc, app = _ident(settings.pg_shop_db), _ident(settings.cdc_user), _ident(settings.pg_app_user)
    owner = sql.SQL("ALTER DATABASE {} OWNER TO {}")
    out = [owner.format(_ident(settings.airflow_db), _ident(settings.pg_airflow_user)),
           owner.format(_ident(settings.metastore_db), _ident(settings.pg_metastore_user))]
    # The owner keeps its rights (they are in the ACL); PUBLIC loses CONNECT and TEMPORARY.
    out += [sql.SQL("REVOKE ALL ON DATABASE {} FROM PUBLIC").format(_ident(db))
            for db in (settings.pg_shop_db, settings.airflow_db, settings.metastore_db)]
    out += [sql.SQL("REVOKE ALL ON DATABASE {} FROM {}").format(shop, cdc),  # older installations granted CREATE
            sql.SQL("GRANT CONNECT ON DATABASE {} TO {}, {}").format(shop, cdc, app)]
    return out


def shop_privilege_sql(settings: Settings, tables: list[str]) -> list[sql.Composed]:
    """Grants inside the shop database (after its migrations): the app role's DML on ``tables``, nothing to create."""
    from psycopg2 import sql

    cdc, app = _ident(settings.cdc_user), _ident(settings.pg_app_user)
    listed = sql.SQL(", ").join(sql.SQL("public.{}").format(_ident(t)) for t in tables)
    return [sql.SQL("REVOKE CREATE ON SCHEMA public FROM PUBLIC").format(),
            sql.SQL("REVOKE CREATE ON SCHEMA public FROM {}, {}").format(cdc, app),
            sql.SQL("GRANT USAGE ON SCHEMA public TO {}").format(app),
            sql.SQL("GRANT SELECT, INSERT, UPDATE, DELETE ON {} TO {}").format(listed, app),
            sql.SQL("GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {}").format(app)]


#: relkind -> the ALTER ... OWNER TO noun (sequences owned by a column follow their table).
_REL_KINDS = {"r": "TABLE", "p": "TABLE", "v": "VIEW", "m": "MATERIALIZED VIEW", "S": "SEQUENCE", "f": "FOREIGN TABLE"}

#: Objects of the current database owned by a role, outside the system schemas, as (ALTER noun, qualified name).
_OWNED_OBJECTS = r"""
SELECT 'SCHEMA', quote_ident(n.nspname) FROM pg_namespace n
 WHERE n.nspowner = %(role)s::regrole AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'public')
   AND n.nspname NOT LIKE 'pg\_%%'
UNION ALL
SELECT c.relkind::text, quote_ident(n.nspname) || '.' || quote_ident(c.relname)
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE c.relowner = %(role)s::regrole AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f')
   AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\_%%'
   AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid
                   AND d.deptype IN ('a', 'i'))
UNION ALL
SELECT CASE t.typtype WHEN 'd' THEN 'DOMAIN' ELSE 'TYPE' END, quote_ident(n.nspname) || '.' || quote_ident(t.typname)
  FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
 WHERE t.typowner = %(role)s::regrole AND t.typtype IN ('e', 'd')
   AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\_%%'
UNION ALL
SELECT 'ROUTINE', p.oid::regprocedure::text FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
 WHERE p.proowner = %(role)s::regrole
   AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\_%%'
"""


def owner_transfer_sql(owned: list[tuple[str, str]], owner: str) -> list[sql.Composed]:
    """``ALTER ... OWNER TO owner`` for each (kind, quoted name) row of :data:`_OWNED_OBJECTS`.

    The names arrive quoted by the server (``quote_ident``, ``regprocedure`` with its argument types), so they
    go in as SQL text; ``kind`` is one of the query's own nouns or relkinds. Not ``REASSIGN OWNED``: it also
    moves the old owner's databases (shared objects), and the bootstrap superuser owns the system catalogs,
    which cannot move.
    """
    from psycopg2 import sql

    return [sql.SQL("ALTER {} {} OWNER TO {}").format(sql.SQL(_REL_KINDS.get(kind, kind)), sql.SQL(name),
                                                      _ident(owner))
            for kind, name in owned]


def hba_addresses(host: str) -> list[str]:
    """pg_hba ADDRESS values for clients on this machine reaching PostgreSQL at ``host``.

    A loopback IPv4 address other than 127.0.0.1 is still reached from source 127.0.0.1 (Linux's route for
    127/8 has ``src 127.0.0.1``), so both are listed; a host name becomes ``samehost`` (this machine's own
    addresses), never ``all``.
    """
    import ipaddress

    if host == "localhost":
        return ["127.0.0.1/32", "::1/128"]
    try:
        ip = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return ["samehost"]
    bits = 32 if ip.version == 4 else 128
    out = [f"{ip}/{bits}"]
    if ip.version == 4 and ip.is_loopback and str(ip) != "127.0.0.1":
        out.insert(0, "127.0.0.1/32")
    return out


def pg_hba_text(settings: Settings) -> str:
    """The whole pg_hba.conf: scram everywhere, each role only where it works, no physical replication.

    Debezium's replication connection is logical (``replication=database``), which pg_hba matches against the
    database column (shop), not the ``replication`` keyword; that keyword is for physical replication (a base
    backup of the whole cluster), which no line allows.
    """
    admin, cdc = settings.pg_superuser, settings.cdc_user
    rows = [("local", "all", admin, "")]
    for addr in hba_addresses(settings.pg_host):
        rows += [("host", "all", admin, addr),
                 ("host", settings.pg_shop_db, cdc, addr),
                 ("host", settings.pg_shop_db, settings.pg_app_user, addr),
                 ("host", settings.airflow_db, settings.pg_airflow_user, addr),
                 ("host", settings.metastore_db, settings.pg_metastore_user, addr)]
    lines = ["# Written by `lake stack up` (spark_jobs.stack.postgres.pg_hba_text) on every start: edits are lost.",
             "# TYPE  DATABASE  USER  ADDRESS  METHOD"]
    lines += [f"{t:<6} {db:<10} {user:<16} {addr:<16} scram-sha-256" for t, db, user, addr in rows]
    return "\n".join(lines) + "\n"


def write_pg_hba(settings: Settings) -> bool:
    """Write pg_hba.conf into the cluster (owned by PostgreSQL's OS user); True if it changed."""
    data, _ = pg_dirs(settings)
    path = data / "pg_hba.conf"
    text = pg_hba_text(settings)
    if path.exists() and path.read_text(encoding="utf-8") == text:
        return False
    tmp = path.with_name("pg_hba.conf.lake-tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.chmod(0o600)
    _chown(tmp, pg_os_user(settings))
    tmp.replace(path)
    return True


def configure_postgres(settings: Settings) -> None:
    """Roles, databases, owners and pg_hba; passwords re-synced with the state dir's .env each start.

    Also migrates an installation from before least privilege: creates the missing roles, hands the airflow
    and metastore databases and everything the superuser created in them to their roles, revokes PUBLIC's
    and the CDC role's old rights and replaces initdb's pg_hba (reloaded, no restart).
    """
    import psycopg2
    from psycopg2 import sql

    conn = psycopg2.connect(settings.pg_dsn(), connect_timeout=5)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute(sql.SQL("ALTER ROLE {} PASSWORD %s").format(_ident(settings.pg_superuser)),
                        (settings.pg_password,))
            for role, password, replication in _roles(settings):
                cur.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,))
                cur.execute(role_sql(role, cur.fetchone() is not None, replication), (password,))
            owners = {settings.pg_shop_db: settings.pg_superuser, settings.airflow_db: settings.pg_airflow_user,
                      settings.metastore_db: settings.pg_metastore_user}
            for db, owner in owners.items():
                cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (db,))
                if not cur.fetchone():
                    cur.execute(sql.SQL("CREATE DATABASE {} OWNER {} ENCODING 'UTF8'").format(_ident(db),
                                                                                            _ident(owner)))
            for stmt in database_privilege_sql(settings):
                cur.execute(stmt)
        for db, owner in ((settings.airflow_db, settings.pg_airflow_user),
                          (settings.metastore_db, settings.pg_metastore_user)):
            moved = _transfer_owned(settings, db, owner)
            if moved:
                log.info(f"  postgres  gave {moved} object(s) of database {db} to role {owner}")
        if write_pg_hba(settings):
            log.info("  postgres  wrote pg_hba.conf (each role only for its database; no physical replication)")
        with conn.cursor() as cur:
            cur.execute("SELECT pg_reload_conf()")
            cur.execute("SELECT line_number, error FROM pg_hba_file_rules WHERE error IS NOT NULL")
            errors = cur.fetchall()
        if errors:
            raise StackError(f"PostgreSQL rejected pg_hba.conf lines {errors}; see pg_hba_text() in {__file__}")
    finally:
        conn.close()


def _transfer_owned(settings: Settings, db: str, owner: str) -> int:
    """Hand what the superuser owns in ``db`` to ``owner`` (installations whose services ran as superuser)."""
    import psycopg2

    conn = psycopg2.connect(settings.pg_dsn(db), connect_timeout=5)
    try:
        with conn, conn.cursor() as cur:
            cur.execute(_OWNED_OBJECTS, {"role": settings.pg_superuser})
            statements = owner_transfer_sql([(str(k), str(n)) for k, n in cur.fetchall()], owner)
            for stmt in statements:
                cur.execute(stmt)
    finally:
        conn.close()
    return len(statements)


def secure_shop(settings: Settings) -> None:
    """The app role's grants in the shop database (after :func:`migrate_shop`: the tables must exist)."""
    import psycopg2

    from spark_jobs.contracts.shop import CDC_TABLES

    conn = psycopg2.connect(settings.pg_dsn(settings.pg_shop_db), connect_timeout=5)
    try:
        with conn, conn.cursor() as cur:
            for stmt in shop_privilege_sql(settings, sorted(t.table for t in CDC_TABLES.values())):
                cur.execute(stmt)
    finally:
        conn.close()


SHOP_MIGRATIONS = REPO_ROOT / "infra" / "postgres" / "shop"


def migrate_shop(settings: Settings) -> list[str]:
    """Apply ``infra/postgres/shop/V*.sql`` not applied yet, each in one transaction."""
    import psycopg2

    applied_now: list[str] = []
    conn = psycopg2.connect(settings.pg_dsn(settings.pg_shop_db), connect_timeout=5)
    try:
        with conn, conn.cursor() as cur:
            cur.execute("CREATE TABLE IF NOT EXISTS public.lake_schema_migrations ("
                        "version text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())")
            cur.execute("SELECT version FROM public.lake_schema_migrations")
            done = {r[0] for r in cur.fetchall()}
        for path in sorted(SHOP_MIGRATIONS.glob("V*.sql")):
            version = path.name.split("__", 1)[0]
            if version in done:
                continue
            cdc_user = _ident(settings.cdc_user).as_string(conn)  # psycopg2 quotes on a connection
            text = render_template(path.read_text(encoding="utf-8"), {"CDC_USER": cdc_user})
            try:
                with conn, conn.cursor() as cur:
                    cur.execute(text)
                    cur.execute("INSERT INTO public.lake_schema_migrations (version) VALUES (%s)", (version,))
            except psycopg2.Error as exc:
                raise StackError(f"shop migration {path} failed: {exc}".strip()) from exc
            log.info(f"  applied shop migration {path.name}")
            applied_now.append(version)
    finally:
        conn.close()
    return applied_now


def _ident(name: str) -> sql.Identifier:
    """A role, database or table name as a quoted identifier (psycopg2 quotes it).

    Names are also held to letters, digits and underscores: they come from settings, and pg_hba.conf
    (:func:`pg_hba_text`) lists the same role and database names unquoted.
    """
    from psycopg2 import sql

    if not name.replace("_", "").isalnum():
        raise StackError(f"role name {name!r} must be alphanumeric/underscore")
    return sql.Identifier(name)


def configure(settings: Settings) -> None:
    """Every ``lake stack up`` of a running PostgreSQL: roles and grants, shop migrations, the app role's grants."""
    configure_postgres(settings)
    migrate_shop(settings)
    secure_shop(settings)
