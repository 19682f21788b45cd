"""``.env.example`` rendered from the settings model, so the file cannot drift from the code.

Regenerate it after changing a field: ``python -m spark_jobs.settings.env_example`` (``--check`` only compares).
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

from spark_jobs.settings.model import REPO_ROOT, Settings, defaults, public_name
from spark_jobs.settings.validation import env_name

PATH = REPO_ROOT / ".env.example"

_HEADER = """\
# Every Lakestream setting with its default. Copy what you change into your
# environment (or <state dir>/.env). Secrets (empty here) are generated per
# installation into <state dir>/.env by `lake stack up`; never commit them.
# Defaults in {braces} are derived from other settings.
# Generated from spark_jobs/settings/model.py: python -m spark_jobs.settings.env_example
"""


#: Defaults that depend on who runs the generator (root or not); the field's description names both.
_AS_WRITTEN = {"cache_dir": "~/.cache/lakestream"}


def render() -> str:
    """The text of ``.env.example``: each field's description as a comment above ``LAKE_<NAME>=<default>``."""
    values = defaults()
    lines = [_HEADER]
    for field_name, field in Settings.model_fields.items():
        name = public_name(field_name)
        if field.description:
            lines += textwrap.wrap(field.description, width=116, initial_indent="# ", subsequent_indent="# ",
                                   break_long_words=False, break_on_hyphens=False)
        # Paths as a reader should write them, not as they resolve on this machine.
        value = _AS_WRITTEN.get(name) or values[name].replace(str(REPO_ROOT), "<repo>").replace(str(Path.home()), "~")
        lines.append(f"{env_name(name)}={value}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    text = render()
    if args == ["--check"]:
        if PATH.read_text(encoding="utf-8") != text:
            print(f"{PATH} is out of date: run python -m spark_jobs.settings.env_example", file=sys.stderr)
            return 1
        return 0
    if args:
        print("usage: python -m spark_jobs.settings.env_example [--check]", file=sys.stderr)
        return 2
    PATH.write_text(text, encoding="utf-8")
    print(f"wrote {PATH}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
