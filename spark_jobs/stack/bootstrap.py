"""One-time and every-start preparation of the services' state. All idempotent."""

from __future__ import annotations

import importlib.metadata
import json
import logging
import os
import pwd
import stat
from pathlib import Path
from typing import Any

from spark_jobs.contracts.tables import gold_steps
from spark_jobs.jars import java_bin
from spark_jobs.quality import docs_assets
from spark_jobs.quality.docs import data_docs_dir
from spark_jobs.session import write_private
from spark_jobs.settings import Settings
from spark_jobs.stack.errors import StackError, run_tool
from spark_jobs.stack.postgres import pg_os_user
from spark_jobs.stack.tools import venv_bin

log = logging.getLogger(__name__)


# ---------------------------------------------------------------- the state dir

#: umask of ``lake`` and every supervised program: what they create is the owner's alone.
UMASK = 0o077


def secure_state_dir(settings: Settings) -> int:
    """Make the state dir private and tighten what is already in it; returns how many modes were changed.

    Directories 0700, files 0600 (group and other bits removed; owner bits kept). One exception when we are
    root: PostgreSQL refuses root and runs as ``LAKE_PG_OS_USER``, and its cluster and socket live under
    ``data/`` and ``run/``; those two folders and the state dir itself are then 0710 with that user's group,
    which lets it traverse them and nothing more (no listing, no reading).
    """
    os.umask(UMASK)
    dirs = (settings.state_dir, settings.data_dir, settings.run_dir)
    for d in dirs:
        d.mkdir(mode=0o700, parents=True, exist_ok=True)
    pg_group = None
    user = pg_os_user(settings)
    if user and user != "root":
        pg_group = pwd.getpwnam(user).pw_gid
    changed = 0
    for root, dirnames, filenames in os.walk(settings.state_dir):
        for name in [*dirnames, *filenames]:
            path = Path(root) / name
            try:
                st = path.lstat()
                if stat.S_ISLNK(st.st_mode) or not st.st_mode & 0o077 or path in dirs:
                    continue
                os.chmod(path, stat.S_IMODE(st.st_mode) & 0o700)
                changed += 1
            except FileNotFoundError:  # a temp file of a running service
                continue
    for d in dirs:
        st = d.stat()
        mode = 0o710 if pg_group is not None else 0o700
        if pg_group is not None and st.st_gid != pg_group:
            os.chown(d, -1, pg_group, follow_symlinks=False)  # root: never through a link
        if stat.S_IMODE(st.st_mode) != mode:
            os.chmod(d, mode)
            changed += 1
    return changed


# ---------------------------------------------------------------- MinIO

def bucket_policy(bucket: str) -> dict[str, object]:
    """IAM policy for the lake's keys: everything inside its bucket, nothing else."""
    return {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow",
             "Action": ["s3:GetBucketLocation", "s3:ListBucket", "s3:ListBucketMultipartUploads",
                        "s3:ListBucketVersions"],
             "Resource": [f"arn:aws:s3:::{bucket}"]},
            # Old versions can be read (``lake restore-path`` copies them back) but not deleted, nor the bucket's
            # versioning or lifecycle changed, with keys every Spark process holds. MinIO lets s3:DeleteObject
            # delete a version too unless s3:DeleteObjectVersion is denied outright (minio/minio#16409).
            {"Effect": "Allow",
             "Action": ["s3:GetObject", "s3:GetObjectVersion", "s3:PutObject", "s3:DeleteObject",
                        "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts"],
             "Resource": [f"arn:aws:s3:::{bucket}/*"]},
            {"Effect": "Deny", "Action": ["s3:DeleteObjectVersion"], "Resource": [f"arn:aws:s3:::{bucket}/*"]},
        ],
    }


def configure_minio(settings: Settings) -> None:
    from minio import Minio, MinioAdmin
    from minio.credentials.providers import StaticProvider

    endpoint = settings.s3_endpoint.split("://", 1)[1]
    secure = settings.s3_endpoint.startswith("https")
    root = StaticProvider(settings.minio_root_user, settings.minio_root_password)
    client = Minio(endpoint, credentials=root, secure=secure, region=settings.s3_region)
    if not client.bucket_exists(settings.s3_bucket):
        client.make_bucket(settings.s3_bucket)
    ensure_versioning(client, settings.s3_bucket, settings.s3_noncurrent_days)
    admin = MinioAdmin(endpoint=endpoint, credentials=root, secure=secure, region=settings.s3_region)
    policy_name = f"{settings.s3_bucket}-readwrite"
    admin.policy_add(policy_name, policy=bucket_policy(settings.s3_bucket))
    admin.user_add(settings.s3_access_key, settings.s3_secret_key)
    try:
        admin.attach_policy([policy_name], user=settings.s3_access_key)
    except Exception as exc:
        if "already" not in str(exc).lower() and "XMinioAdminPolicyChangeAlreadyApplied" not in str(exc):
            raise


#: The one lifecycle rule of the lake's bucket (MinIO rejects AbortIncompleteMultipartUpload: not set).
LIFECYCLE_RULE_ID = "lake-expire-noncurrent"


def ensure_versioning(client: Any, bucket: str, noncurrent_days: int) -> None:
    """Versioning on, and one lifecycle rule: a version expires ``noncurrent_days`` after it stopped being current
    (overwritten or deleted), and a delete marker with no version left behind it goes too. Every ``up``; only
    what differs is set.

    With versioning a delete or an overwrite (a VACUUM, a mistaken ``rm``, a dropped managed table) keeps the
    old bytes as a noncurrent version that ``lake restore-path`` can bring back until it expires."""
    from minio.commonconfig import ENABLED, Filter
    from minio.lifecycleconfig import Expiration, LifecycleConfig, NoncurrentVersionExpiration, Rule
    from minio.versioningconfig import VersioningConfig

    if client.get_bucket_versioning(bucket).status != ENABLED:
        client.set_bucket_versioning(bucket, VersioningConfig(ENABLED))
        log.info(f"  minio     versioning enabled on bucket {bucket}")
    current = client.get_bucket_lifecycle(bucket)
    have = [(r.rule_id, getattr(r.noncurrent_version_expiration, "noncurrent_days", None),
             getattr(r.expiration, "expired_object_delete_marker", None)) for r in (current.rules if current else [])]
    if have != [(LIFECYCLE_RULE_ID, noncurrent_days, True)]:
        rule = Rule(ENABLED, rule_filter=Filter(prefix=""), rule_id=LIFECYCLE_RULE_ID,
                    noncurrent_version_expiration=NoncurrentVersionExpiration(noncurrent_days=noncurrent_days),
                    expiration=Expiration(expired_object_delete_marker=True))
        client.set_bucket_lifecycle(bucket, LifecycleConfig([rule]))
        log.info(f"  minio     lifecycle of bucket {bucket}: old versions expire {noncurrent_days} day(s) after "
                 "they stop being current (LAKE_S3_NONCURRENT_DAYS)")


# ---------------------------------------------------------------- Kafka

def format_kafka(settings: Settings) -> None:
    data = settings.data_dir / "kafka"
    if (data / "meta.properties").exists():
        return
    data.mkdir(parents=True, exist_ok=True)
    cp = str(settings.cache_dir / "jars" / "kafka" / "*")
    cluster_id = run_tool([java_bin(), "-cp", cp, "kafka.tools.StorageTool", "random-uuid"],
                      "kafka-storage random-uuid").strip().splitlines()[-1]
    log.info(f"  formatting Kafka storage {data} (cluster {cluster_id})")
    run_tool([java_bin(), "-cp", cp, f"-Dlog4j2.configurationFile={settings.conf_dir / 'log4j2' / 'kafka.yaml'}",
          "kafka.tools.StorageTool", "format", "-t", cluster_id,
          "-c", str(settings.conf_dir / "kafka" / "server.properties"), "--ignore-formatted"],
         "kafka-storage format")


def ensure_topic_retention(settings: Settings) -> None:
    """Retention of the CDC and events topics as the settings say (also on a running broker)."""
    from spark_jobs.kafka_topics import TopicError, ensure_retention

    try:
        for line in ensure_retention(settings):
            log.info(f"  kafka     {line}")
    except TopicError as exc:
        raise StackError(str(exc)) from exc


# ---------------------------------------------------------------- Airflow

def prepare_airflow(settings: Settings, env: dict[str, str]) -> None:
    """Migrate the metadata DB (when the Airflow version changed) and seed the admin password."""
    home = settings.state_dir / "airflow"
    home.mkdir(parents=True, exist_ok=True)
    # SimpleAuthManager reads this file; it generates only for users missing here.
    write_private(home / "passwords.json", json.dumps({settings.airflow_admin_user: settings.airflow_admin_password}))
    # The installed version, without importing airflow (its import reconfigures this process's logging).
    version = importlib.metadata.version("apache-airflow")
    full_env = {**os.environ, **env}
    stamp = home / ".migrated"
    if not (stamp.exists() and stamp.read_text().strip() == version):
        log.info("  migrating the Airflow metadata database (first start takes a minute)")
        run_tool([str(venv_bin() / "airflow"), "db", "migrate"], "airflow db migrate", env=full_env)
        stamp.write_text(version)


#: One slot per table the gold DAG writes: two DAG runs (scheduled or backfill) never write the same Delta table
#: at once (Delta on S3 without a DynamoDB log store: one writer per table, DESIGN.md).
GOLD_POOLS = {**{f"gold_{t.short}": f"one writer at a time for {t.name}" for t in gold_steps()},
              "ops_serving_watermark": "one writer at a time for ops.serving_watermark"}
#: Every pool the DAGs use: the gold writers and one replay at a time (lake_replay).
POOLS = {**GOLD_POOLS, "ops_replay": "one replay at a time (lake_replay writes the shadows, the live tables it "
                                     "switches and ops.replays)"}


def ensure_pools(home: Path, env: dict[str, str]) -> None:
    """Create the writer pools the DAGs use (``airflow pools import``, only when the set changed)."""
    wanted = json.dumps({name: {"slots": 1, "description": desc, "include_deferred": False}
                         for name, desc in sorted(POOLS.items())}, indent=1)
    path = home / "pools.json"
    if path.exists() and path.read_text() == wanted and (home / ".pools-imported").exists():
        return
    path.write_text(wanted)
    log.info(f"  creating Airflow pools {', '.join(sorted(POOLS))}")
    run_tool([str(venv_bin() / "airflow"), "pools", "import", str(path)], "airflow pools import", env=env)
    (home / ".pools-imported").write_text("ok")




def ensure_serving_views(settings: Settings) -> None:
    """The serving database, ``ops.serving_watermark`` and the serving views, on the Spark Connect server (idempotent;
    a view whose gold or silver sources do not exist yet is reported and created by a later run)."""
    from spark_jobs.serving.views import bootstrap as create_serving

    log.info("  serving views (Spark Connect)")
    create_serving(settings)


# ---------------------------------------------------------------- Data Docs

def prepare_data_docs(settings: Settings) -> None:
    """The Data Docs folder the ``dq-docs`` server serves, with a placeholder until the first validation; the
    web assets its pages load must be installed (``make setup``)."""
    assets = docs_assets.assets_dir(settings.cache_dir)
    missing = docs_assets.missing_files(assets)
    if missing:
        raise StackError(f"the Data Docs' web assets are missing from {assets} ({missing[0]} and "
                         f"{len(missing) - 1} more): run `make setup` (it downloads them from the npm registry)")
    site = data_docs_dir(settings)
    site.mkdir(parents=True, exist_ok=True)
    index = site / "index.html"
    if not index.exists():
        index.write_text("<!doctype html><title>Lakestream data quality</title><h1>No validation has run yet</h1>"
                         "<p>Run <code>lake dq run --table silver.orders</code> or a gold backfill; this page is "
                         "replaced by the Great Expectations Data Docs.</p>\n", encoding="utf-8")
