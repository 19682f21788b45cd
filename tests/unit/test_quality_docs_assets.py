"""Data Docs assets: the CDN -> local rewrite, the pinned-checksum install, and coverage of GX's templates."""

from __future__ import annotations

import io
import re
import tarfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from spark_jobs.quality import docs_assets as assets


def _gx_view_dir() -> Path:
    import great_expectations

    return Path(great_expectations.__file__).parent / "render" / "view"


# ------------------------------------------------------------------------------------------ the rewrite


def test_every_cdn_url_of_gx_templates_and_styles_has_a_local_copy() -> None:
    # A GX upgrade that loads a new CDN file fails here, before a page goes out with it.
    view = _gx_view_dir()
    sources = sorted((view / "templates").glob("*.j2")) + sorted((view / "static" / "styles").glob("*.css"))
    assert len(sources) > 20
    for source in sources:
        text = source.read_text(encoding="utf-8")
        out, missing = assets.localize(text)
        assert missing == [], source.name
        assert assets.external_asset_urls(out) == [], source.name
        # Nothing fetched from a CDN host remains, whatever the context (Jinja variables included).
        assert not re.search(r"https?://(unpkg\.com|cdn\.jsdelivr\.net|cdnjs\.cloudflare\.com|code\.jquery\.com|"
                             r"[a-z]+\.bootstrapcdn\.com|great-expectations-web-assets)", out), source.name


def test_every_local_path_is_a_file_of_a_pinned_package() -> None:
    served = {p.url_path(f) for p in assets.PACKAGES for f in p.files if "*" not in f and not f.endswith("/")}
    vendored = {path for path in assets.CDN.values() if path.startswith(assets.VENDOR_PREFIX)}
    assert vendored <= served, vendored - served
    assert {p.spec for p in assets.PACKAGES} == {path[len(assets.VENDOR_PREFIX):].split("/dist/")[0]
                                                .split("/build/")[0].split("/css/")[0] for path in vendored}


def test_known_cdn_urls_become_local_paths_and_links_stay() -> None:
    page = ('<link rel="stylesheet" href="https://maxcdn.bootstrapcdn.com/bootstrap/4.3.1/css/bootstrap.min.css"/>'
            '<script src="https://cdn.jsdelivr.net/npm/vega@5"></script>'
            '<img src="https://great-expectations-web-assets.s3.us-east-2.amazonaws.com/logo-long.png?d=1">'
            "<style>.a { background: url('https://great-expectations-web-assets.s3.us-east-2.amazonaws.com/"
            "full_logo_dark.png') }</style>"
            '<a href="https://greatexpectations.io">GX</a>')
    out, missing = assets.localize(page)
    assert missing == []
    assert '<link rel="stylesheet" href="/static/vendor/bootstrap@4.3.1/dist/css/bootstrap.min.css"/>' in out
    assert '<script src="/static/vendor/vega@5.33.1/build/vega.min.js"></script>' in out
    assert '<img src="/static/images/logo-long.png?d=1">' in out
    assert "url('/static/images/logo-long.png')" in out
    assert '<a href="https://greatexpectations.io">GX</a>' in out  # a hyperlink loads nothing by itself
    assert assets.external_asset_urls(out) == []


def test_an_unknown_external_asset_is_pointed_at_a_local_404_and_reported() -> None:
    page = ('<script src="https://evil.example.com/x.js"></script>'
            '<link href="//fonts.example.org/css?family=A" rel="stylesheet">'
            '<div style="background-image: url(http://img.example.net/a.png)"></div>'
            '<img srcset="https://img.example.net/1.png 1x, /local.png 2x">'
            '<script src="http://127.0.0.1:18090/ok.js"></script>'
            '<a href="https://example.com/page">link</a>')
    out, missing = assets.localize(page)
    assert sorted(missing) == ["//fonts.example.org/css?family=A", "http://img.example.net/a.png",
                               "https://evil.example.com/x.js", "https://img.example.net/1.png"]
    assert assets.external_asset_urls(out) == []
    assert '<script src="/static/vendor/missing/evil.example.com/x.js"></script>' in out
    assert 'href="/static/vendor/missing/fonts.example.org/css"' in out
    assert "url(/static/vendor/missing/img.example.net/a.png)" in out
    assert "http://127.0.0.1:18090/ok.js" in out  # loopback is this machine
    assert '<a href="https://example.com/page">' in out


@pytest.mark.parametrize(("url", "loopback"), [
    ("http://127.0.0.1:18090/a", True), ("http://127.1.2.3/a", True), ("http://[::1]:80/a", True),
    ("http://localhost/a", True), ("https://10.0.0.1/a", False), ("https://cdn.jsdelivr.net/npm/vega@5", False),
    ("https://127.0.0.1.example.com/a", False)])
def test_loopback_urls(url: str, loopback: bool) -> None:
    assert assets.is_loopback_url(url) is loopback


# ------------------------------------------------------------------------------------------ the install


def _tarball(files: dict[str, bytes], top: str = "package") -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(f"{top}/{name}" if top else name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _package(tarball: bytes, *files: str) -> assets.NpmPackage:
    return assets.NpmPackage("@scope/lib", "1.2.3", assets.sha512_integrity(tarball), (*files, "LICENSE*"))


FILES = {"dist/lib.min.js": b"js", "dist/lib.js": b"unused", "fonts/a.woff2": b"font", "fonts/b.woff2": b"font2",
         "LICENSE.txt": b"MIT", "src/vendor/LICENSE": b"not ours"}


def test_unpack_keeps_the_wanted_files_of_a_verified_tarball(tmp_path: Path) -> None:
    tgz = _tarball(FILES)
    package = _package(tgz, "dist/lib.min.js", "fonts/")
    written = assets.unpack(package, tgz, tmp_path / package.spec)
    assert sorted(written) == ["LICENSE.txt", "dist/lib.min.js", "fonts/a.woff2", "fonts/b.woff2"]
    assert (tmp_path / "@scope/lib@1.2.3/dist/lib.min.js").read_bytes() == b"js"
    assert not (tmp_path / "@scope/lib@1.2.3/dist/lib.js").exists()
    assert assets.installed(package, tmp_path) and assets.missing_files(tmp_path, (package,)) == []


def test_a_tarball_with_another_checksum_is_refused_and_the_old_copy_kept(tmp_path: Path) -> None:
    good = _tarball(FILES)
    package = _package(good, "dist/lib.min.js")
    assets.unpack(package, good, tmp_path / package.spec)
    tampered = _tarball({**FILES, "dist/lib.min.js": b"evil"})
    with pytest.raises(assets.AssetError, match="checksum"):
        assets.unpack(package, tampered, tmp_path / package.spec)
    assert (tmp_path / "@scope/lib@1.2.3/dist/lib.min.js").read_bytes() == b"js"


def test_a_tarball_without_a_wanted_file_is_refused(tmp_path: Path) -> None:
    tgz = _tarball({"dist/lib.js": b"x"})
    package = _package(tgz, "dist/lib.min.js")
    with pytest.raises(assets.AssetError, match=r"dist/lib\.min\.js"):
        assets.unpack(package, tgz, tmp_path / package.spec)
    assert not (tmp_path / package.spec).exists() and list(tmp_path.glob("**/.lib@*")) == []


def test_a_path_escaping_the_package_is_refused(tmp_path: Path) -> None:
    tgz = _tarball({"package/../../etc/x.js": b"x"}, top="")
    package = assets.NpmPackage("lib", "1.0.0", assets.sha512_integrity(tgz), ("../etc/x.js",))
    with pytest.raises(assets.AssetError, match="unsafe path"):
        assets.unpack(package, tgz, tmp_path / "out" / package.spec)
    assert not (tmp_path / "etc").exists()


def test_install_downloads_each_missing_package_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tgz = _tarball(FILES)
    package = _package(tgz, "dist/lib.min.js")
    fetched: list[str] = []

    def download(url: str) -> bytes:
        fetched.append(url)
        return tgz

    monkeypatch.setattr(assets, "download", download)
    assert assets.install(tmp_path, "https://registry.example/", (package,)) == 1
    assert fetched == ["https://registry.example/@scope/lib/-/lib-1.2.3.tgz"]
    assert assets.install(tmp_path, "https://registry.example/", (package,)) == 0
    assert len(fetched) == 1


def test_the_install_command_fails_loudly_naming_what_failed(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(url: str) -> bytes:
        raise assets.AssetError(f"GET {url} -> HTTP 404")

    monkeypatch.setattr(assets, "download", refuse)
    result = CliRunner().invoke(assets.cli, ["install", "--cache-dir", str(tmp_path),
                                             "--registry", "https://registry.example"])
    assert result.exit_code == 1
    assert "GET https://registry.example/jquery/-/jquery-3.7.1.tgz -> HTTP 404" in result.output
    assert "make setup" in result.output


def test_tarball_urls_follow_the_registry_layout() -> None:
    assert assets.FONT_AWESOME.tarball_url() == \
        "https://registry.npmjs.org/@fortawesome/fontawesome-free/-/fontawesome-free-6.6.0.tgz"
    assert assets.JQUERY.tarball_url("https://mirror.example/npm/") == \
        "https://mirror.example/npm/jquery/-/jquery-3.7.1.tgz"


# ------------------------------------------------------------------------------------------ the download


def test_download_tries_three_times_on_a_connection_error_or_a_5xx(monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    import httpx

    url = "https://registry.example/pkg/-/pkg-1.0.0.tgz"
    slept: list[float] = []
    monkeypatch.setattr(time, "sleep", slept.append)

    def serve(*answers: int | Exception) -> list[str]:
        queue, calls = list(answers), []

        def get(where: str, **_: object) -> httpx.Response:
            calls.append(where)
            answer = queue.pop(0)
            if isinstance(answer, Exception):
                raise answer
            return httpx.Response(answer, content=b"tarball", request=httpx.Request("GET", where))

        monkeypatch.setattr(httpx, "get", get)
        return calls

    calls = serve(httpx.ConnectError("refused"), 503, 200)
    assert assets.download(url) == b"tarball" and len(calls) == 3 and slept == [2, 5]  # waits grow: 2 s, 5 s
    slept.clear()
    calls = serve(502, 502, 502, 200)
    with pytest.raises(assets.AssetError, match=f"GET {re.escape(url)} failed: HTTPStatusError: .*502"):
        assets.download(url)
    assert len(calls) == 3 and slept == [2, 5]
    slept.clear()
    calls = serve(404, 200)
    with pytest.raises(assets.AssetError, match=f"GET {re.escape(url)} -> HTTP 404"):
        assets.download(url)
    assert len(calls) == 1 and slept == []
