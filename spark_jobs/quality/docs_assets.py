"""The Data Docs' web assets, served by the stack instead of public CDNs, and the rewrite that points pages at them.

GX's page templates load bootstrap, jQuery, bootstrap-table, vega and font-awesome from CDNs (unpkg, jsDelivr,
cdnjs, ...) and GX's logo from its S3 bucket. Offline a page then renders as an unstyled, empty list, and online
every view tells those hosts who reads which page. Instead:

- ``make setup`` (:func:`install`) downloads each npm package of :data:`PACKAGES` from the npm registry at the
  version the templates reference, checks the tarball against the sha512 pinned here, and keeps only the files
  the pages use under ``<cache dir>/web/npm/<name>@<version>/``;
- the ``dq-docs`` server serves them at ``/static/vendor/<name>@<version>/...`` and rewrites every HTML page it
  serves (:func:`localize`): each CDN URL of :data:`CDN` becomes its local path. Rewriting when serving, not after
  a render, covers every page whoever wrote it (GX's builds, older pages, the trend page). An external asset URL
  that is not in :data:`CDN` is pointed at a local path that does not exist (a 404 in the server's log naming it)
  rather than left to leave the machine; :func:`external_asset_urls` finds them.
"""

from __future__ import annotations

import base64
import fnmatch
import hashlib
import html.parser
import io
import ipaddress
import logging
import os
import re
import shutil
import tarfile
import tempfile
import urllib.parse
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import click
import httpx

from spark_jobs.waits import retrying

log = logging.getLogger(__name__)

#: URL path under which the dq-docs server serves :func:`assets_dir`.
VENDOR_PREFIX = "/static/vendor/"
#: Where the rewrite points an external asset URL that has no local copy (served as a 404).
MISSING_PREFIX = VENDOR_PREFIX + "missing/"
NPM_REGISTRY = "https://registry.npmjs.org"
_STAMP = ".lake-integrity"


@dataclass(frozen=True)
class NpmPackage:
    """One npm package version and the files of it the pages use (a name ending in ``/``: a whole folder)."""

    name: str
    version: str
    #: The registry's ``dist.integrity`` of the tarball (``npm view <name>@<version> dist.integrity``).
    integrity: str
    files: tuple[str, ...]

    @property
    def spec(self) -> str:
        return f"{self.name}@{self.version}"

    def tarball_url(self, registry: str = NPM_REGISTRY) -> str:
        """The registry's tarball URL (npm's own layout: ``<registry>/<name>/-/<basename>-<version>.tgz``)."""
        return f"{registry.rstrip('/')}/{self.name}/-/{self.name.split('/')[-1]}-{self.version}.tgz"

    def url_path(self, file: str) -> str:
        """Where the dq-docs server serves ``file`` of this package."""
        return f"{VENDOR_PREFIX}{self.spec}/{file}"


def _pkg(name: str, version: str, integrity: str, *files: str) -> NpmPackage:
    # Every package's licence travels with its files.
    return NpmPackage(name, version, integrity, (*files, "package.json", "LICENSE*"))


# Versions are the templates' own (great_expectations/render/view/templates/*.j2, GX 1.24.1). The vega scripts
# are referenced by major version only (``vega@5``): the newest release of that major when pinned.
JQUERY = _pkg("jquery", "3.7.1",
              "sha512-m4avr8yL8kmFN8psrbFFFmB/If14iN5o9nw/NgnnM+kybDJpRsAynV2BsfpTYrTRysYUdADVD7CkUUizgkpLfg==",
              "dist/jquery.min.js")
POPPER = _pkg("popper.js", "1.12.9",
              "sha512-s0EEi9xiSCdqz9lV4IiVH5yIZnDX/U1t0tCjB+0jXx9jW8lrR7kOpVupiUg175ogqVoudpDXHF1p6dKATCHMeg==",
              "dist/umd/popper.min.js")
BOOTSTRAP = _pkg("bootstrap", "4.3.1",
                 "sha512-rXqOmH1VilAt2DyPzluTi2blhk17bO7ef+zLLPlWvG494pDxcM234pJ8wTc/6R40UWizAIIMgxjvxZg5kmsbag==",
                 "dist/css/bootstrap.min.css", "dist/js/bootstrap.min.js")
BOOTSTRAP_TABLE = _pkg("bootstrap-table", "1.19.1",
                       "sha512-WvV+l1AI/C+zThaKmfHmi/IuayVNB0qdFyEhFx1jyZhO0oLtNJNANkCR3rvJf6Dkh72dsLElxpE/bzK9seEQLA==",
                       "dist/bootstrap-table.min.css", "dist/bootstrap-table.min.js",
                       "dist/extensions/filter-control/bootstrap-table-filter-control.min.js")
# The templates take the filter-control stylesheet from 1.19.0 and its script from 1.19.1.
BOOTSTRAP_TABLE_1190 = _pkg("bootstrap-table", "1.19.0",
                            "sha512-L+USHm3X9FKocx/6yngGu12yF6r6s1Ntuc+hoIK2a2QQJjHw5kcySLiE2HY/9sEaSGAOfPbfQOtBH3uKkcpqEA==",
                            "dist/extensions/filter-control/bootstrap-table-filter-control.css",
                            "dist/extensions/filter-control/bootstrap-table-filter-control.min.css")
DATEPICKER = _pkg("bootstrap-datepicker", "1.9.0",
                  "sha512-9rYYbaVOheGYxjOr/+bJCmRPihfy+LkLSg4fIFMT9Od8WwWB/MB50w0JO1eBgKUMbb7PFHQD5uAfI3ArAxZRXA==",
                  "dist/css/bootstrap-datepicker.min.css", "dist/js/bootstrap-datepicker.min.js")
BOOTSTRAP_DARK = _pkg("@forevolve/bootstrap-dark", "1.1.0",
                      "sha512-A3ucpEpxPoTVO490lZZCfjPXxv832l7mm1IxX3bXyxvgwnPGXDLyh7dWrphXKO8YBAu3EswbBEu3VSW8NRMW3A==",
                      "dist/css/bootstrap-prefers-dark.css")
FONT_AWESOME = _pkg("@fortawesome/fontawesome-free", "6.6.0",
                    "sha512-60G28ke/sXdtS9KZCpZSHHkCbdsOGEhIUGlwq6yhY74UpTiToIh8np7A8yphhM4BWsvNFtIvLpi4co+h9Mr9Ow==",
                    "css/all.min.css", "webfonts/")  # all.min.css loads ../webfonts/*
VEGA = _pkg("vega", "5.33.1", "sha512-1fArfVDUqVbb5z8n+/nVQb+VNBzx8svY6CrsyTK4Ujm4yrd9I1auoKxBAPXLCavY1LcrbHUskQbGUP8gXOzyQw==",
            "build/vega.min.js")
VEGA_LITE = _pkg("vega-lite", "5.23.0",
                 "sha512-l4J6+AWE3DIjvovEoHl2LdtCUkfm4zs8Xxx7INwZEAv+XVb6kR6vIN1gt3t2gN2gs/y4DYTs/RPoTeYAuEg6mA==",
                 "build/vega-lite.min.js")
VEGA_EMBED = _pkg("vega-embed", "6.29.0",
                  "sha512-PmlshTLtLFLgWtF/b23T1OwX53AugJ9RZ3qPE2c01VFAbgt3/GSNI/etzA/GzdrkceXFma+FDHNXUppKuM0U6Q==",
                  "build/vega-embed.min.js")

PACKAGES: tuple[NpmPackage, ...] = (JQUERY, POPPER, BOOTSTRAP, BOOTSTRAP_TABLE, BOOTSTRAP_TABLE_1190, DATEPICKER,
                                    BOOTSTRAP_DARK, FONT_AWESOME, VEGA, VEGA_LITE, VEGA_EMBED)

#: GX's logo bucket -> GX's own images, which every build copies into the site's ``static/images/``.
GX_WEB_ASSETS = "https://great-expectations-web-assets.s3.us-east-2.amazonaws.com/"

#: Every external asset URL of GX's templates and styles -> the local path served instead. A URL prefix (ending
#: in ``/``) maps everything under it.
CDN: dict[str, str] = {
    "https://code.jquery.com/jquery-3.7.1.min.js": JQUERY.url_path("dist/jquery.min.js"),
    "https://cdnjs.cloudflare.com/ajax/libs/popper.js/1.12.9/umd/popper.min.js": POPPER.url_path("dist/umd/popper.min.js"),
    "https://maxcdn.bootstrapcdn.com/bootstrap/4.3.1/css/bootstrap.min.css": BOOTSTRAP.url_path("dist/css/bootstrap.min.css"),
    "https://stackpath.bootstrapcdn.com/bootstrap/4.3.1/js/bootstrap.min.js": BOOTSTRAP.url_path("dist/js/bootstrap.min.js"),
    **{f"https://unpkg.com/{p.spec}/{f}": p.url_path(f)
       for p in (BOOTSTRAP_TABLE, BOOTSTRAP_TABLE_1190) for f in p.files if f.startswith("dist/")},
    "https://cdnjs.cloudflare.com/ajax/libs/bootstrap-datepicker/1.9.0/css/bootstrap-datepicker.min.css":
        DATEPICKER.url_path("dist/css/bootstrap-datepicker.min.css"),
    "https://cdnjs.cloudflare.com/ajax/libs/bootstrap-datepicker/1.9.0/js/bootstrap-datepicker.min.js":
        DATEPICKER.url_path("dist/js/bootstrap-datepicker.min.js"),
    "https://cdn.jsdelivr.net/npm/@forevolve/bootstrap-dark@1.1.0/dist/css/bootstrap-prefers-dark.css":
        BOOTSTRAP_DARK.url_path("dist/css/bootstrap-prefers-dark.css"),
    "https://cdnjs.cloudflare.com/ajax/libs/font-awesome/6.6.0/css/all.min.css": FONT_AWESOME.url_path("css/all.min.css"),
    # jsDelivr serves a package's ``jsdelivr`` entry (its minified browser build) for a bare ``npm/<name>@<range>``.
    "https://cdn.jsdelivr.net/npm/vega@5": VEGA.url_path("build/vega.min.js"),
    "https://cdn.jsdelivr.net/npm/vega-lite@5": VEGA_LITE.url_path("build/vega-lite.min.js"),
    "https://cdn.jsdelivr.net/npm/vega-embed@6": VEGA_EMBED.url_path("build/vega-embed.min.js"),
    # The navbar's logo (logo-long.png) is in GX's static images; the dark logo of the default styles is not:
    # the same logo stands in for it.
    GX_WEB_ASSETS + "full_logo_dark.png": "/static/images/logo-long.png",
    GX_WEB_ASSETS: "/static/images/",
}

# Longest first, so a full URL wins over a prefix of it; a URL ends at a quote, space, parenthesis or angle bracket.
_URL = re.compile(r"https?://[^\s\"'()<>]+", re.IGNORECASE)
_CSS_URL = re.compile(r"""(?:url\(\s*|@import\s+)["']?(https?://[^\s"'()<>]+)""", re.IGNORECASE)
#: A relative link into GX's ``static/`` folder of the site (``../../static/images/x.png``, ``./static/...``).
_GX_STATIC = re.compile(r"""(["'(])(?:\.\./|\./)*static/(?=(?:images|fonts|styles|scripts)/)""")
#: Attributes through which a browser fetches something when the page loads (``<a href>`` only on a click).
_FETCHED = {"script": ("src",), "link": ("href",), "img": ("src", "srcset"), "iframe": ("src",), "frame": ("src",),
            "source": ("src", "srcset"), "video": ("src", "poster"), "audio": ("src",), "embed": ("src",),
            "object": ("data",), "input": ("src",), "track": ("src",), "image": ("href", "xlink:href"),
            "use": ("href", "xlink:href")}


def is_loopback_url(url: str) -> bool:
    """``url``'s host is this machine's loopback (``localhost``, ``127.0.0.0/8``, ``::1``)."""
    host = (urllib.parse.urlsplit(url).hostname or "").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _local_path(url: str) -> str:
    for cdn in sorted(CDN, key=len, reverse=True):
        if url == cdn or (cdn.endswith("/") and url.startswith(cdn)):
            return CDN[cdn] + url[len(cdn):]
    return ""


def missing_path(url: str) -> str:
    """The local path an external asset URL without a local copy is pointed at (a 404 that names it)."""
    parts = urllib.parse.urlsplit(url)
    return MISSING_PREFIX + urllib.parse.quote(f"{parts.netloc}{parts.path}", safe="/")


class _AssetUrls(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.found: list[str] = []
        self._in_style = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        wanted = _FETCHED.get(tag, ())
        for name, value in attrs:
            if not value:
                continue
            if name in wanted:
                candidates = [c.strip().split()[0] for c in value.split(",") if c.strip()] if name == "srcset" \
                    else [value.strip()]
                self.found += [c for c in candidates if c.lower().startswith(("http://", "https://", "//"))]
            elif name == "style":
                self.found += _CSS_URL.findall(value)
        self._in_style = tag == "style"

    def handle_endtag(self, tag: str) -> None:
        self._in_style = False

    def handle_data(self, data: str) -> None:
        if self._in_style:
            self.found += _CSS_URL.findall(data)


def external_asset_urls(page: str) -> list[str]:
    """URLs ``page`` makes a browser fetch from another machine as it loads: the ``src``/``href`` of scripts,
    stylesheets, images, frames and media, and ``url(...)``/``@import`` in its styles; loopback URLs are not
    external. Hyperlinks (``<a href>``) are not fetched by loading, so they are not listed."""
    parser = _AssetUrls()
    parser.feed(page)
    parser.close()
    out: list[str] = []
    for url in parser.found:
        full = "https:" + url if url.startswith("//") else url
        if not is_loopback_url(full) and url not in out:
            out.append(url)
    return out


def localize(page: str) -> tuple[str, list[str]]:
    """``page`` with every external asset URL replaced by the stack's local path; -> (page, URLs with no local
    copy, which now point at :func:`missing_path`). Hyperlinks to other sites are kept.

    GX's relative links into the site's own ``static/`` folder become absolute (the site is served at ``/``):
    GX counts a validation page's folders one short for its favicon, a 404 on every validation page.
    """
    assets = set(external_asset_urls(page))

    def swap(match: re.Match[str]) -> str:
        url = match.group(0)
        local = _local_path(url)
        if local:
            return local
        if url in assets:
            return missing_path(url)
        return url

    out = _GX_STATIC.sub(r"\1/static/", _URL.sub(swap, page))
    missing = [u for u in assets if not _local_path(u)]
    # Protocol-relative ("//host/...") asset URLs have no scheme for the pattern above.
    for url in missing:
        if url.startswith("//"):
            out = out.replace(url, missing_path("https:" + url))
    return out, missing


# --------------------------------------------------------------------------------------------- install


def assets_dir(cache_dir: Path) -> Path:
    """The installed packages (``<cache dir>/web/npm``); the dq-docs server serves it at :data:`VENDOR_PREFIX`."""
    return cache_dir / "web" / "npm"


def missing_files(root: Path, packages: tuple[NpmPackage, ...] = PACKAGES) -> list[str]:
    """``<name>@<version>/<file>`` of every wanted file (folders: non-empty) not installed under ``root``."""
    out: list[str] = []
    for p in packages:
        for f in p.files:
            if "*" in f:
                continue
            path = root / p.spec / f
            if not (path.is_dir() and any(path.iterdir())) if f.endswith("/") else not path.is_file():
                out.append(f"{p.spec}/{f}")
    return out


class AssetError(RuntimeError):
    """An asset could not be downloaded, verified or unpacked."""


def sha512_integrity(data: bytes) -> str:
    """npm's ``dist.integrity`` form of ``data``: ``sha512-<base64 digest>``."""
    return "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode("ascii")


def _wanted(package: NpmPackage, member: str) -> bool:
    # A pattern (``LICENSE*``) matches files at the package's top only.
    return any(member.startswith(f) if f.endswith("/") else fnmatch.fnmatchcase(member, f) if "*" in f
               else member == f for f in package.files)


def unpack(package: NpmPackage, tarball: bytes, dest: Path) -> list[str]:
    """Check ``tarball`` against ``package.integrity`` and write its wanted files into ``dest`` (replaced as a
    whole, so a failure leaves the previous copy); -> the files written (paths inside the package)."""
    got = sha512_integrity(tarball)
    if got != package.integrity:
        raise AssetError(f"{package.spec}: the tarball's checksum {got[:30]}... is not the pinned "
                         f"{package.integrity[:30]}...: refusing it (a changed or corrupted download)")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    tmp.chmod(0o755)  # public files; the service user reads root's cache
    written: list[str] = []
    try:
        with tarfile.open(fileobj=io.BytesIO(tarball), mode="r:gz") as tar:
            for member in tar.getmembers():
                # npm tarballs hold one top folder (``package/``, some older ones another name).
                if member.name.startswith("/") or ".." in PurePosixPath(member.name).parts:
                    raise AssetError(f"{package.spec}: unsafe path {member.name!r} in the tarball")
                rel = PurePosixPath(*PurePosixPath(member.name).parts[1:]).as_posix()
                if not member.isfile() or not _wanted(package, rel):
                    continue
                target = tmp / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                source = tar.extractfile(member)
                assert source is not None  # a regular file
                target.write_bytes(source.read())
                written.append(rel)
        (tmp / _STAMP).write_text(package.integrity + "\n", encoding="utf-8")
        missing = [f for f in package.files if "*" not in f and not (tmp / f).exists()]
        if missing:
            raise AssetError(f"{package.spec}: the tarball has no {', '.join(missing)}")
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(tmp, dest)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return written


def installed(package: NpmPackage, root: Path) -> bool:
    """``package`` is under ``root`` from a tarball with its pinned checksum, every wanted file present."""
    stamp = root / package.spec / _STAMP
    return stamp.is_file() and stamp.read_text(encoding="utf-8").strip() == package.integrity \
        and not missing_files(root, (package,))


def download(url: str, timeout: float = 60) -> bytes:
    """GET ``url`` (3 tries on a connection error or a 5xx); any other failure raises :class:`AssetError`."""
    def get() -> bytes:
        response = httpx.get(url, timeout=timeout, follow_redirects=True)
        if response.status_code >= 500:
            response.raise_for_status()
        if response.status_code != 200:
            raise AssetError(f"GET {url} -> HTTP {response.status_code}")
        return response.content

    try:
        return retrying(get, httpx.HTTPError, every=2, increment=3, attempts=3)  # waits 2 s, then 5 s
    except httpx.HTTPError as exc:
        raise AssetError(f"GET {url} failed: {type(exc).__name__}: {exc}") from exc


def install(root: Path, registry: str = NPM_REGISTRY, packages: tuple[NpmPackage, ...] = PACKAGES) -> int:
    """Download, verify and unpack every package not yet installed under ``root``; -> how many were installed."""
    n = 0
    for package in packages:
        if installed(package, root):
            continue
        url = package.tarball_url(registry)
        data = download(url)
        files = unpack(package, data, root / package.spec)
        click.echo(f"  {package.spec}: {len(data) / 1e6:.1f} MB from {url}, sha512 ok, {len(files)} file(s)")
        n += 1
    return n


@click.group()
def cli() -> None:
    """The Data Docs' web assets (served by the dq-docs service instead of CDNs)."""


@cli.command("install")
@click.option("--cache-dir", type=click.Path(path_type=Path), required=True, help="the lake's cache (LAKE_CACHE_DIR)")
@click.option("--registry", envvar="NPM_CONFIG_REGISTRY", default=NPM_REGISTRY, show_default=True,
              help="npm registry to download from (NPM_CONFIG_REGISTRY, as npm reads it)")
def install_command(cache_dir: Path, registry: str) -> None:
    """Download the npm packages GX's Data Docs templates load, verify each against its pinned sha512, and keep
    the files the pages use under <cache dir>/web/npm."""
    root = assets_dir(cache_dir)
    try:
        n = install(root, registry)
    except AssetError as exc:
        raise click.ClickException(f"{exc}. Data Docs assets are not installed in {root}; fix the cause (is "
                                   f"{registry} reachable?) and run `make setup` again.") from exc
    click.echo(f"{n} package(s) installed, {len(PACKAGES) - n} up to date ({root})")


if __name__ == "__main__":
    cli(prog_name="python -m spark_jobs.quality.docs_assets")
