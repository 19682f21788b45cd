"""``lake restore-path``: put every object under a prefix of the versioned lake bucket back as it was at a time.

The bucket keeps old versions and delete markers for ``LAKE_S3_NONCURRENT_DAYS`` (``lake stack up`` turns
versioning on). A restore never deletes a version: for each key, the newest version written at or before the
time is copied over the current one (a new current version), and a key that did not exist then (created later,
or deleted before the time) gets a delete marker. So a restore can itself be undone by another restore to a
later time, and it needs only the lake's own keys (list and read versions, put, delete: no ``s3:DeleteObjectVersion``).

A Delta table is a prefix: restoring its ``_delta_log`` and data files to one instant gives the table as it was
committed then. Restore while nothing writes the table (the streaming app stopped for a stream-owned table).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from spark_jobs.settings import Settings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ObjectVersion:
    """One entry of a version listing: a version of ``key`` or a delete marker."""

    key: str
    version_id: str
    last_modified: datetime
    is_delete_marker: bool = False
    is_latest: bool = False
    etag: str = ""


@dataclass(frozen=True)
class RestoreAction:
    """``copy``: make ``version_id`` the current version of ``key`` again; ``delete``: put a delete marker."""

    key: str
    kind: Literal["copy", "delete"]
    version_id: str | None = None
    last_modified: datetime | None = None


def plan(versions: Iterable[ObjectVersion], at: datetime) -> list[RestoreAction]:
    """What makes every key of ``versions`` current as it was at ``at`` (timezone-aware), sorted by key.

    Per key: the state at ``at`` is its newest entry modified at or before ``at`` (a version, a delete marker, or
    none: the key did not exist yet). If that is a version other than the current one (nor the same bytes: an
    earlier restore's copy has the same ETag), copy it; if the key did not exist then but has a current version
    now, delete it; otherwise nothing to do, so a second restore to the same time changes nothing. Entries with the same time
    keep the listing's order (S3 lists a key's versions newest first).
    """
    if at.tzinfo is None:
        raise ValueError(f"restore time {at.isoformat()} has no time zone; give one (e.g. 2026-11-26T20:00:00Z)")
    by_key: dict[str, list[ObjectVersion]] = {}
    for v in versions:
        by_key.setdefault(v.key, []).append(v)
    actions: list[RestoreAction] = []
    for key in sorted(by_key):
        entries = sorted(by_key[key], key=lambda v: v.last_modified, reverse=True)  # stable: listing order on ties
        current = next((v for v in entries if v.is_latest), entries[0])
        then = next((v for v in entries if v.last_modified <= at), None)
        if then is not None and not then.is_delete_marker:
            same = then.version_id == current.version_id or (
                not current.is_delete_marker and bool(then.etag) and then.etag == current.etag)
            if not same:
                actions.append(RestoreAction(key, "copy", then.version_id, then.last_modified))
        elif not current.is_delete_marker:
            actions.append(RestoreAction(key, "delete"))
    return actions


def split_s3_uri(uri: str) -> tuple[str, str]:
    """``s3a://lake/warehouse/ops/x`` -> ``("lake", "warehouse/ops/x/")``: bucket and a prefix ending in ``/``."""
    scheme, sep, rest = uri.partition("://")
    if not sep or scheme not in ("s3", "s3a") or not rest.split("/", 1)[0]:
        raise ValueError(f"{uri!r} is not an s3a://<bucket>/<prefix> path")
    bucket, _, prefix = rest.partition("/")
    prefix = prefix.strip("/")
    if not prefix:
        raise ValueError(f"{uri!r} names the whole bucket; give a table's path or a folder under it")
    return bucket, prefix + "/"


def resolve(settings: Settings, target: str) -> tuple[str, str]:
    """Bucket and prefix of ``target``: an ``s3a://`` path, or a table name (``ops.smoke``) whose path derives
    from the warehouse layout (:func:`spark_jobs.table_io.table_location`)."""
    from spark_jobs.table_io import table_location

    uri = target if "://" in target else table_location(settings, target)
    bucket, prefix = split_s3_uri(uri)
    if bucket != settings.s3_bucket:
        raise ValueError(f"{target!r} is in bucket {bucket!r}, not the lake's bucket {settings.s3_bucket!r}")
    return bucket, prefix


def client(settings: Settings) -> Any:
    """A MinIO client with the lake's scoped keys."""
    from minio import Minio

    endpoint = settings.s3_endpoint.split("://", 1)[1]
    return Minio(endpoint, access_key=settings.s3_access_key, secret_key=settings.s3_secret_key,
                 secure=settings.s3_endpoint.startswith("https"), region=settings.s3_region)


def list_versions(s3: Any, bucket: str, prefix: str) -> list[ObjectVersion]:
    """Every version and delete marker under ``prefix``."""
    return [ObjectVersion(o.object_name, o.version_id or "null", o.last_modified, bool(o.is_delete_marker),
                          bool(o.is_latest), (o.etag or "").strip('"'))
            for o in s3.list_objects(bucket, prefix=prefix, recursive=True, include_version=True)]


def apply(s3: Any, bucket: str, actions: Iterable[RestoreAction]) -> int:
    """Carry out ``actions``; returns how many."""
    from minio.commonconfig import CopySource

    done = 0
    for a in actions:
        if a.kind == "copy":
            s3.copy_object(bucket, a.key, CopySource(bucket, a.key, version_id=a.version_id))
        else:
            s3.remove_object(bucket, a.key)
        done += 1
    return done


def restore(settings: Settings, target: str, at: datetime, *, dry_run: bool = False,
            s3: Any = None) -> list[RestoreAction]:
    """Restore ``target`` (a table name or ``s3a://`` path) to its state at ``at``; returns the actions."""
    s3 = s3 or client(settings)
    bucket, prefix = resolve(settings, target)
    versions = list_versions(s3, bucket, prefix)
    if not versions:
        raise ValueError(f"nothing was ever stored under s3a://{bucket}/{prefix} (or its versions have expired "
                         f"after LAKE_S3_NONCURRENT_DAYS={settings.s3_noncurrent_days} days)")
    actions = plan(versions, at)
    copies = sum(a.kind == "copy" for a in actions)
    log.info("lake restore-path: s3a://%s/%s at %s: %d version(s) listed over %d key(s); %d to copy back, %d to "
             "delete%s", bucket, prefix, at.isoformat(), len(versions), len({v.key for v in versions}), copies,
             len(actions) - copies, " (dry run: nothing changed)" if dry_run else "")
    if not dry_run:
        apply(s3, bucket, actions)
    return actions
