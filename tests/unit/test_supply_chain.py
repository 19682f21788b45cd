"""The pinned supply chain: requirements*.lock cover pyproject with hashes; infra/jvm/checksums.sha256 covers the poms.

Regenerate with ``make lock`` / ``make jar-checksums`` (docs/operations.md, Setup); these tests fail when a pin moves without it.
"""

from __future__ import annotations

import re
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from spark_jobs.settings import REPO_ROOT, load_settings
from spark_jobs.stack import jar_checksums

POM_NS = {"m": "http://maven.apache.org/POM/4.0.0"}
_ENTRY = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>\S+)")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _lock(path: Path) -> dict[str, tuple[str, list[str]]]:
    """``{normalised name: (version, [sha256 hashes])}``; every requirement line must be a ``name==version`` pin."""
    out: dict[str, tuple[str, list[str]]] = {}
    current: str | None = None
    for line in path.read_text().splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.startswith("--hash=sha256:"):
            assert current is not None, f"{path}: a hash before any requirement"
            out[current][1].append(stripped.removeprefix("--hash=sha256:").rstrip(" \\"))
            continue
        assert not line.startswith((" ", "-")), f"{path}: unexpected line {line!r} (an option, -e or URL is not locked)"
        match = _ENTRY.match(stripped)
        assert match, f"{path}: {stripped!r} is not pinned with =="
        current = _norm(match["name"])
        out[current] = (match["version"], [])
    return out


def _requirements(specs: list[str]) -> dict[str, str | None]:
    """``{normalised name: pinned version or None}`` of PEP 508 strings (extras and markers dropped)."""
    out: dict[str, str | None] = {}
    for spec in specs:
        match = re.match(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*(==\s*([^\s;,]+))?", spec)
        assert match, spec
        out[_norm(match[1])] = match[3]
    return out


PYPROJECT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
LOCK = _lock(REPO_ROOT / "requirements.lock")
BUILD_LOCK = _lock(REPO_ROOT / "requirements-build.lock")


@pytest.mark.parametrize("group", ["dependencies", "dev"])
def test_the_lock_pins_every_pyproject_dependency_at_its_version(group: str) -> None:
    project = PYPROJECT["project"]
    specs = project["dependencies"] if group == "dependencies" else project["optional-dependencies"][group]
    wrong = {name: (pin, LOCK.get(name, ("absent", []))[0]) for name, pin in _requirements(specs).items()
             if name not in LOCK or (pin is not None and LOCK[name][0] != pin)}
    assert wrong == {}, "pyproject pin vs requirements.lock: run make lock"


def test_every_locked_package_has_a_sha256_hash() -> None:
    for path, lock in (("requirements.lock", LOCK), ("requirements-build.lock", BUILD_LOCK)):
        unhashed = [name for name, (_, hashes) in lock.items() if not hashes]
        assert unhashed == [], f"{path}: no --hash for {unhashed}"
        assert all(re.fullmatch(r"[0-9a-f]{64}", h) for _, hashes in lock.values() for h in hashes)


def test_the_build_lock_covers_the_build_system_and_agrees_with_the_main_lock() -> None:
    needed = _requirements(PYPROJECT["build-system"]["requires"])
    assert set(needed) <= set(BUILD_LOCK) and "pip" in BUILD_LOCK
    shared = {name: (v, LOCK[name][0]) for name, (v, _) in BUILD_LOCK.items() if name in LOCK and LOCK[name][0] != v}
    assert shared == {}


def _pom_artifacts(pom: Path) -> list[str]:
    """The files a pom's declared artifacts become in ``<cache>/jars`` (``<group>/...``), versions resolved."""
    root = ET.parse(pom).getroot()
    props = {el.tag.split("}")[1]: (el.text or "").strip() for el in root.find("m:properties", POM_NS) or []}

    def text(el: ET.Element, tag: str) -> str:
        found = el.find(f"m:{tag}", POM_NS)
        value = (found.text or "").strip() if found is not None else ""
        return re.sub(r"\$\{([^}]+)\}", lambda m: props[m[1]], value)

    group = pom.parent.name
    files = []
    for dep in root.findall("m:dependencies/m:dependency", POM_NS) + root.findall(
            "m:dependencyManagement/m:dependencies/m:dependency", POM_NS):
        artifact, version, classifier = text(dep, "artifactId"), text(dep, "version"), text(dep, "classifier")
        files.append(f"{group}/{artifact}-{version}{'-' + classifier if classifier else ''}.jar")
    for item in root.iter(f"{{{POM_NS['m']}}}artifactItem"):
        # A plugin tarball unpacked into one folder named after the artifact, holding its jar.
        artifact, version = text(item, "artifactId"), text(item, "version")
        files.append(f"{group}/{artifact}/{artifact}-{version}.jar")
    return files


POMS = sorted((REPO_ROOT / "infra" / "jvm").glob("*/pom.xml"))


@pytest.mark.parametrize("pom", POMS, ids=[p.parent.name for p in POMS])
def test_the_checksum_file_pins_every_artifact_the_pom_declares(pom: Path) -> None:
    pinned = jar_checksums.read()
    declared = _pom_artifacts(pom)
    assert declared, pom
    assert [f for f in declared if f not in pinned] == [], "a pom changed without make jar-checksums"


def test_the_checksum_file_pins_exactly_the_groups_of_the_poms() -> None:
    groups = {name.split("/", 1)[0] for name in jar_checksums.read()}
    assert groups == {p.parent.name for p in POMS}


def test_the_checksum_file_lists_exactly_the_installed_jars_when_the_cache_is_here() -> None:
    jars = load_settings({}, dotenv=False).cache_dir / "jars"
    if not all((jars / p.parent.name / ".lake-stamp").exists() for p in POMS):
        pytest.skip(f"no resolved jar cache at {jars} (make setup)")
    listed = sorted(jar_checksums.read())
    assert [a for p in POMS for a in jar_checksums.artifacts(jars, p.parent.name)] == listed


def test_verify_names_a_changed_a_missing_and_an_extra_file(tmp_path: Path) -> None:
    (tmp_path / "kafka").mkdir()
    (tmp_path / "kafka" / "a-1.jar").write_bytes(b"a")
    (tmp_path / "kafka" / "b-1.jar").write_bytes(b"b")
    (tmp_path / "kafka" / ".lake-stamp").write_text("x")
    pinned = jar_checksums.compute(tmp_path, ["kafka"])
    assert not jar_checksums.verify(tmp_path, "kafka", pinned)

    (tmp_path / "kafka" / "a-1.jar").write_bytes(b"tampered")
    (tmp_path / "kafka" / "b-1.jar").unlink()
    (tmp_path / "kafka" / "c-1.jar").write_bytes(b"c")
    result = jar_checksums.verify(tmp_path, "kafka", pinned)
    assert (result.changed, result.missing, result.extra) == (["kafka/a-1.jar"], ["kafka/b-1.jar"], ["kafka/c-1.jar"])
    path = tmp_path / "sums"
    path.write_text(jar_checksums.render(pinned))
    assert jar_checksums.read(path) == pinned
