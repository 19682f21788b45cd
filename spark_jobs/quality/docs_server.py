"""The ``dq-docs`` service: serves the GX Data Docs site on the stack's port and renders queued pages.

Validation tasks store their result and queue its key (:func:`spark_jobs.quality.docs.store_validation`); this
process renders what is queued every ``--interval`` seconds, one GX build at a time, so no task waits for GX's
index rebuild. Run by supervisord: ``python -m spark_jobs.quality.docs_server --bind HOST --port PORT``.

Pages show sample failing rows (e-mails, names): every request needs the login (HTTP basic auth, user
``LAKE_DQ_DOCS_USER``, password ``LAKE_DQ_DOCS_PASSWORD``), assets included; anything else gets a 401 and no
content. Pages are served with their CDN URLs rewritten to the assets ``make setup`` installed
(:mod:`spark_jobs.quality.docs_assets`, at ``/static/vendor/``), and a Content-Security-Policy that lets a
browser load nothing from another origin, so no request leaves the machine.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hmac
import http
import http.server
import io
import logging
import os
import posixpath
import socket
import sys
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any, BinaryIO

import click

from spark_jobs.quality import docs, docs_assets
from spark_jobs.settings import Settings, load_settings

log = logging.getLogger("lake.dq-docs")


#: Nothing from another origin; inline scripts and styles (GX's pages are full of them) and eval (vega's
#: expression parser) from this one only.
CSP = ("default-src 'self'; script-src 'self' 'unsafe-inline' 'unsafe-eval'; style-src 'self' 'unsafe-inline'; "
       "img-src 'self' data:; font-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; "
       "form-action 'self'; base-uri 'self'")
REALM = "Lakestream Data Docs"


def check_basic_auth(header: str | None, user: str, password: str) -> bool:
    """``header`` (an ``Authorization`` value) carries ``user`` and ``password``; compared in constant time.
    An empty configured password never matches."""
    if not header or not password:
        return False
    scheme, _, encoded = header.partition(" ")
    if scheme.lower() != "basic":
        return False
    try:
        given = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return False
    given_user, sep, given_password = given.partition(":")
    if not sep:
        return False
    user_ok = hmac.compare_digest(given_user.encode(), user.encode())
    password_ok = hmac.compare_digest(given_password.encode(), password.encode())
    return user_ok and password_ok


def _under(root: str, url_path: str) -> str:
    """``url_path`` (decoded, no query) as a file under ``root``: the stdlib server's rule (no ``..``, no drive)."""
    words = [w for w in posixpath.normpath(url_path).split("/") if w and w not in (os.curdir, os.pardir)]
    path = os.path.join(root, *words)
    return path + "/" if url_path.endswith("/") else path


class _Handler(http.server.SimpleHTTPRequestHandler):
    """The site (``directory``) and the vendored assets (``assets``), behind the login, pages rewritten."""

    def __init__(self, *args: Any, user: str, password: str, assets: Path, **kwargs: Any) -> None:
        self.user, self.password, self.assets = user, password, assets
        super().__init__(*args, **kwargs)

    def log_message(self, format: str, *args: Any) -> None:
        if len(args) > 1 and str(args[1]).startswith(("4", "5")):  # errors only: probes and readers poll
            log.info("%s %s", self.address_string(), format % args)

    def end_headers(self) -> None:
        self.send_header("Content-Security-Policy", CSP)
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        super().end_headers()

    def _authorized(self) -> bool:
        if check_basic_auth(self.headers.get("Authorization"), self.user, self.password):
            return True
        body = b"401: log in to the Data Docs (user LAKE_DQ_DOCS_USER, password LAKE_DQ_DOCS_PASSWORD)\n"
        self.send_response(http.HTTPStatus.UNAUTHORIZED)
        self.send_header("WWW-Authenticate", f'Basic realm="{REALM}", charset="UTF-8"')
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        return False

    def do_GET(self) -> None:
        if self._authorized():
            super().do_GET()

    def do_HEAD(self) -> None:
        if self._authorized():
            super().do_HEAD()

    def translate_path(self, path: str) -> str:
        url_path = urllib.parse.unquote(urllib.parse.urlsplit(path).path, errors="surrogatepass")
        if url_path == "/favicon.ico":  # what a browser asks of a page that names none (the trend page)
            url_path = "/static/images/favicon.ico"  # GX's, copied into the site by its builds
        if url_path.startswith(docs_assets.VENDOR_PREFIX):
            return _under(str(self.assets), url_path[len(docs_assets.VENDOR_PREFIX) - 1:])
        return _under(self.directory, url_path)

    def send_head(self) -> BinaryIO | None:
        path = self.translate_path(self.path)
        if os.path.isdir(path) and path.endswith("/"):
            path = os.path.join(path, "index.html")
        if path.endswith((".html", ".htm")) and os.path.isfile(path):
            return self._send_page(path)
        return super().send_head()

    def _send_page(self, path: str) -> BinaryIO:
        """An HTML page with its CDN URLs pointed at the stack's copies (read whole: pages are small)."""
        with open(path, "rb") as handle:
            text = handle.read().decode("utf-8", "replace")
        page, missing = docs_assets.localize(text)
        if missing:
            log.warning("%s loads %s, which has no local copy (spark_jobs/quality/docs_assets.py CDN): pointed at "
                        "a 404 instead", self.path, ", ".join(missing))
        body = page.encode("utf-8")
        self.send_response(http.HTTPStatus.OK)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")  # data behind a login: not kept by a browser's cache
        self.end_headers()
        return io.BytesIO(body)

    def list_directory(self, path: str | os.PathLike[str]) -> None:
        self.send_error(http.HTTPStatus.NOT_FOUND, "No index here")
        return None


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


def make_server(site: Path, assets: Path, bind: str, port: int, user: str, password: str) -> _Server:
    """The HTTP server of the site (not started): ``site`` at ``/``, ``assets`` at ``/static/vendor/``, every
    request behind the login ``user`` / ``password``."""
    if not password:
        raise click.ClickException("LAKE_DQ_DOCS_PASSWORD is empty: `lake stack up` generates it into "
                                   "<state dir>/.env; the Data Docs are not served without a login")
    server_class: type[_Server] = _Server6 if ":" in bind else _Server
    handler = functools.partial(_Handler, directory=str(site), user=user, password=password, assets=assets)
    return server_class((bind, port), handler)


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
    assets = docs_assets.assets_dir(settings.cache_dir)
    missing = docs_assets.missing_files(assets)
    if missing:
        log.error("Data Docs assets missing from %s (%s, ...): pages render unstyled; run `make setup`",
                  assets, missing[0])
    stop = threading.Event()
    renderer = threading.Thread(target=render_loop, args=(settings, stop, interval), name="render", daemon=True)
    renderer.start()
    with make_server(site, assets, bind, port, settings.dq_docs_user, settings.dq_docs_password) as server:
        log.info("serving %s on http://%s:%d/ (login: user %s)", site, bind, port, settings.dq_docs_user)
        try:
            server.serve_forever()
        finally:
            stop.set()
    return 0


if __name__ == "__main__":
    main(prog_name="python -m spark_jobs.quality.docs_server")
