"""GX Data Docs of this installation: store a validation, render its page, serve it on the stack's port; and the
trend page beside it (drawn by :mod:`spark_jobs.quality.trend`).

A validation task stores its result and queues its key (milliseconds); the ``dq-docs`` service
(:mod:`spark_jobs.quality.docs_server`) renders queued pages one build at a time. GX rebuilds the index from
every stored validation on each build (1-3 s here), which used to sit on every gold and DQ task's critical
path and serialised parallel tasks on the project lock. :func:`build_data_docs` still renders in-process
(tests, ``lake bench dq``, a process without the stack).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import urllib.parse
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spark_jobs.settings import Settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


def gx_project_dir(settings: Settings) -> Path:
    """The GX file context (suites, validation results, Data Docs) of this installation."""
    return settings.state_dir / "dq"


def data_docs_dir(settings: Settings) -> Path:
    """The static Data Docs site (``index.html``) to serve."""
    return gx_project_dir(settings) / "gx" / "uncommitted" / "data_docs" / "local_site"


def queue_dir(settings: Settings) -> Path:
    """Keys of stored validations whose pages the ``dq-docs`` service has not rendered yet (one JSON file each)."""
    return gx_project_dir(settings) / "render-queue"


@contextlib.contextmanager
def project_lock(settings: Settings) -> Iterator[None]:
    """Parallel tasks share one GX project on disk: its config, stores and index are written under this lock."""
    folder = gx_project_dir(settings)
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextlib.contextmanager
def private_umask() -> Iterator[None]:
    """GX writes the store and pages with the process umask: keep them private whoever calls (an Airflow task
    inherits the stack's 077; a notebook or test process may not)."""
    previous = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(previous)


def _context(settings: Settings) -> Any:
    import great_expectations as gx

    return gx.get_context(mode="file", project_root_dir=str(gx_project_dir(settings)))


def store_validation(settings: Settings, gx_suite: Any, validation: Any, batch_name: str) -> str | None:
    """Store ``validation`` (and ``gx_suite``, its suite) and queue its page for the ``dq-docs`` service.

    Returns the page's URL on the stack's ``dq-docs`` server (it exists once the service rendered it, seconds
    later; :func:`render_queued` renders in-process).
    """
    import great_expectations as gx
    from great_expectations.data_context.types.resource_identifiers import (
        ExpectationSuiteIdentifier,
        ValidationResultIdentifier,
    )

    with private_umask(), project_lock(settings):
        ctx = _context(settings)
        suite_dict = gx_suite.to_json_dict()
        suite_dict.pop("id", None)
        for e in suite_dict.get("expectations", []):
            e.pop("id", None)
        ctx.suites.add_or_update(gx.ExpectationSuite(**suite_dict))
        key = ValidationResultIdentifier(
            expectation_suite_identifier=ExpectationSuiteIdentifier(name=validation.suite_name),
            run_id=validation.meta["run_id"], batch_identifier=_safe(batch_name))
        ctx.validation_results_store.set(key, validation)
        prune_validations(gx_project_dir(settings), validation.suite_name, settings.dq_docs_keep)
        queue = queue_dir(settings)
        queue.mkdir(mode=0o700, exist_ok=True)
        entry = list(key.to_tuple())  # type: ignore[no-untyped-call]
        (queue / f"{uuid.uuid4().hex}.json").write_text(json.dumps(entry), encoding="utf-8")
        urls = ctx.get_docs_sites_urls(resource_identifier=key, only_if_exists=False)
    return served_url(settings, str(urls[0]["site_url"])) if urls else None


def render_queued(settings: Settings) -> int:
    """Render the pages of every queued validation (and of their suites) in one GX build; -> pages rendered.

    A queued validation that was pruned meanwhile is dropped. The index and the trend link are rebuilt once.
    """
    from great_expectations.data_context.types.resource_identifiers import (
        ExpectationSuiteIdentifier,
        ValidationResultIdentifier,
    )

    queue = queue_dir(settings)
    if not queue.is_dir():
        return 0
    with private_umask(), project_lock(settings):
        entries = sorted(queue.glob("*.json"))
        if not entries:
            return 0
        ctx = _context(settings)
        keys: list[Any] = []
        suites: set[str] = set()
        for entry in entries:
            try:
                key = ValidationResultIdentifier.from_tuple(  # type: ignore[no-untyped-call]
                    tuple(json.loads(entry.read_text(encoding="utf-8"))))
            except (ValueError, TypeError, IndexError) as exc:
                log.warning("Data Docs: dropping unreadable queue entry %s: %s", entry, exc)
                continue
            if ctx.validation_results_store.has_key(key):
                keys.append(key)
                suites.add(key.expectation_suite_identifier.name)
        if keys:
            pages: Any = [*keys, *(ExpectationSuiteIdentifier(name=n) for n in sorted(suites))]
            ctx.build_data_docs(resource_identifiers=pages)
            from spark_jobs.quality.trend import link_trend

            link_trend(data_docs_dir(settings))
        for entry in entries:
            entry.unlink(missing_ok=True)
    return len(keys)


def build_data_docs(settings: Settings, gx_suite: Any, validation: Any, batch_name: str) -> str | None:
    """:func:`store_validation` and render its page now, in this process; -> its served URL."""
    url = store_validation(settings, gx_suite, validation, batch_name)
    render_queued(settings)
    return url


def prune_validations(project: Path, suite_name: str, keep: int) -> list[Path]:
    """Keep the newest ``keep`` stored validations of ``suite_name`` (and their rendered pages); -> removed files.

    GX rebuilds the Data Docs index from every stored validation (2.2 s at 349 of them here, growing with each
    run: a lake_dq_streaming run every 10 minutes stores ~1,150 a day), so the store is bounded per table.
    Layout: ``gx/uncommitted/validations/<suite path>/<run id>/<run time>/<batch>.json``, its page at the same
    path under ``data_docs/local_site/validations/`` with ``.html``. Newest by run time (the path's
    ``YYYYmmddTHHMMSS.ffffffZ`` part).
    """
    uncommitted = project / "gx" / "uncommitted"
    store = uncommitted / "validations" / Path(*suite_name.split("."))
    if not store.is_dir():
        return []
    found = sorted(store.glob("*/*/*.json"), key=lambda f: (f.parent.name, f.parent.parent.name, f.name))
    removed: list[Path] = []
    for old in found[:-keep] if keep > 0 else found:
        rel = old.relative_to(uncommitted / "validations")
        page = uncommitted / "data_docs" / "local_site" / "validations" / rel.with_suffix(".html")
        for f in (old, page):
            if f.exists():
                f.unlink()
                removed.append(f)
        for d in (old.parent, old.parent.parent, page.parent, page.parent.parent):
            if d.is_dir() and not any(d.iterdir()):
                d.rmdir()
    return removed


def served_url(settings: Settings, file_url: str) -> str:
    """A page of the local site (GX's ``file://`` URL) -> its URL on the stack's ``dq-docs`` server.

    The task log and ``DqOutcome.docs_url`` name what a user can open: the site is served from
    :func:`data_docs_dir` at ``http://<host>:<dq_docs_port>/``. A page outside that folder keeps its file URL.
    """
    parsed = urllib.parse.urlparse(file_url)
    if parsed.scheme != "file":
        return file_url
    try:
        rel = Path(urllib.parse.unquote(parsed.path)).relative_to(data_docs_dir(settings))
    except ValueError:
        return file_url
    host = f"[{settings.host}]" if ":" in settings.host else settings.host
    return f"http://{host}:{settings.dq_docs_port}/{urllib.parse.quote(rel.as_posix())}"


def _safe(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)[:120] or "whole"


def build_trend_page(spark: SparkSession, settings: Settings, now: datetime | None = None) -> Path:
    """Write ``trend.html`` into the served Data Docs site from ``ops.dq_results`` and link it from the index."""
    from spark_jobs.quality.trend import TREND_PAGE, link_trend, render_trend_page, trend_points, write_atomic

    trend = trend_points(spark)
    page = render_trend_page(trend, now or datetime.now(UTC))
    site = data_docs_dir(settings)
    with project_lock(settings):
        site.mkdir(parents=True, exist_ok=True)
        write_atomic(site / TREND_PAGE, page)
        link_trend(site)
    return site / TREND_PAGE


def refresh_trend_page(spark: SparkSession, settings: Settings) -> None:
    """:func:`build_trend_page`, but a failure is logged, not raised: the page must never fail a DQ task."""
    try:
        build_trend_page(spark, settings)
    except Exception as exc:  # noqa: BLE001 - a report page; the validation and its results are already recorded
        log.warning("DQ trend page not rebuilt: %s", exc)
