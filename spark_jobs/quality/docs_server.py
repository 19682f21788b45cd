"""The ``dq-docs`` service: serves the GX Data Docs site on the stack's port and renders queued pages.

Validation tasks store their result and queue its key (:func:`spark_jobs.quality.docs.store_validation`); this
process renders what is queued every ``--interval`` seconds, one GX build at a time, so no task waits for GX's
index rebuild. Run by supervisord: ``python -m spark_jobs.quality.docs_server --bind HOST --port PORT``.
"""

from __future__ import annotations

import functools
import http.server
import logging
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

import click

from spark_jobs.quality import docs
from spark_jobs.settings import Settings, load_settings

log = logging.getLogger("lake.dq-docs")


class _Handler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        if len(args) > 1 and str(args[1]).startswith(("4", "5")):  # errors only: probes and readers poll
            log.info("%s %s", self.address_string(), format % args)


class _Server(http.server.ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):  # a probe or browser that hung up: not our error
            return
        super().handle_error(request, client_address)


class _Server6(_Server):
    address_family = socket.AF_INET6


def render_loop(settings: Settings, stop: threading.Event, interval: float) -> None:
    """Render queued pages until ``stop``; an error is logged and retried next round, never fatal."""
    while not stop.is_set():
        try:
            t0 = time.monotonic()
            n = docs.render_queued(settings)
            if n:
                log.info("rendered %d validation page(s) in %.1f s", n, time.monotonic() - t0)
        except Exception:
            log.exception("Data Docs render failed (queue %s); retrying", docs.queue_dir(settings))
        stop.wait(interval)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--bind", required=True, help="address to listen on (LAKE_HOST)")
@click.option("--port", type=int, required=True, help="port (LAKE_DQ_DOCS_PORT)")
@click.option("--interval", type=float, default=1.0, show_default=True, help="seconds between render rounds")
def main(bind: str, port: int, interval: float) -> int:
    """Serve the GX Data Docs site and render queued validation pages (the dq-docs service)."""
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(asctime)s %(levelname)s %(message)s")
    settings = load_settings()
    site: Path = docs.data_docs_dir(settings)
    site.mkdir(parents=True, exist_ok=True)
    stop = threading.Event()
    renderer = threading.Thread(target=render_loop, args=(settings, stop, interval), name="render", daemon=True)
    renderer.start()
    server_class: type[_Server] = _Server6 if ":" in bind else _Server
    handler = functools.partial(_Handler, directory=str(site))
    with server_class((bind, port), handler) as server:
        log.info("serving %s on http://%s:%d/", site, bind, port)
        try:
            server.serve_forever()
        finally:
            stop.set()
    return 0


if __name__ == "__main__":
    main(prog_name="python -m spark_jobs.quality.docs_server")
