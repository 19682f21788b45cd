"""The ``dq-docs`` service: serves the GX Data Docs site on the stack's port and renders queued pages.

Validation tasks store their result and queue its key (:func:`spark_jobs.quality.docs.store_validation`); this
process renders what is queued every ``--interval`` seconds, one GX build at a time, so no task waits for GX's
index rebuild. Run by supervisord: ``python -m spark_jobs.quality.docs_server --bind HOST --port PORT``.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import logging
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m spark_jobs.quality.docs_server", description=__doc__)
    parser.add_argument("--bind", required=True, help="address to listen on (LAKE_HOST)")
    parser.add_argument("--port", type=int, required=True, help="port (LAKE_DQ_DOCS_PORT)")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between render rounds")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(asctime)s %(levelname)s %(message)s")
    settings = load_settings()
    site: Path = docs.data_docs_dir(settings)
    site.mkdir(parents=True, exist_ok=True)
    stop = threading.Event()
    renderer = threading.Thread(target=render_loop, args=(settings, stop, args.interval), name="render", daemon=True)
    renderer.start()
    server_class: type[_Server] = _Server6 if ":" in args.bind else _Server
    handler = functools.partial(_Handler, directory=str(site))
    with server_class((args.bind, args.port), handler) as server:
        log.info("serving %s on http://%s:%d/", site, args.bind, args.port)
        try:
            server.serve_forever()
        finally:
            stop.set()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
