"""Pinned SHA-256 of the JVM artifacts: ``python -m spark_jobs.cli.jar_checksums verify|write``.

``verify JARS_DIR GROUP...`` (infra/setup.sh, after each Maven step and on every run): exit 1 naming each file whose
checksum differs from ``infra/jvm/checksums.sha256``, or that is missing or not pinned. ``write [JARS_DIR]``
(``make jar-checksums``, after a version bump): rewrite the file from the cache; review its diff before committing.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from spark_jobs.stack import jar_checksums

GROUPS = ("kafka", "debezium", "spark")
_DIR = click.Path(exists=True, file_okay=False, path_type=Path)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """The pinned checksums of <cache>/jars (infra/jvm/checksums.sha256)."""


@main.command("verify")
@click.argument("jars_dir", type=_DIR)
@click.argument("groups", nargs=-1, required=True, type=click.Choice(GROUPS))
@click.option("--file", "path", type=click.Path(dir_okay=False, path_type=Path), default=jar_checksums.CHECKSUMS,
              show_default=True)
def verify(jars_dir: Path, groups: tuple[str, ...], path: Path) -> None:
    """Check every file of GROUPS under JARS_DIR against the pinned checksums."""
    if not path.exists():
        sys.exit(f"{path} is missing: it pins the jars' checksums; restore it from git (or, for a deliberate "
                 "change, make jar-checksums)")
    pinned = jar_checksums.read(path)
    failed = False
    for group in groups:
        result = jar_checksums.verify(jars_dir, group, pinned)
        if result:
            failed = True
            for line in result.lines():
                click.echo(f"setup: {group}: {line}", err=True)
        else:
            click.echo(f"{group}: {len(jar_checksums.artifacts(jars_dir, group))} files match {path.name}")
    if failed:
        sys.exit(f"setup: the jars above do not match {path} (a corrupt or tampered download, or a version bump "
                 "without make jar-checksums). Delete the group's folder under "
                 f"{jars_dir} and run make setup again; if a version was bumped on purpose, run make jar-checksums "
                 "and review the diff")


@main.command("write")
@click.argument("jars_dir", type=_DIR, required=False)
@click.option("--file", "path", type=click.Path(dir_okay=False, path_type=Path), default=jar_checksums.CHECKSUMS,
              show_default=True)
def write(jars_dir: Path | None, path: Path) -> None:
    """Rewrite the pinned checksums from every group under JARS_DIR (default: <LAKE_CACHE_DIR>/jars), after a
    version bump."""
    if jars_dir is None:
        from spark_jobs.settings import load_settings

        jars_dir = load_settings(dotenv=False).cache_dir / "jars"
    missing = [g for g in GROUPS if not (jars_dir / g).is_dir()]
    if missing:
        sys.exit(f"{jars_dir} has no {', '.join(missing)}: run make setup first")
    entries = jar_checksums.compute(jars_dir, GROUPS)
    path.write_text(jar_checksums.render(entries))
    click.echo(f"wrote {len(entries)} checksums to {path}; review `git diff {path}` before committing")


if __name__ == "__main__":
    main()
