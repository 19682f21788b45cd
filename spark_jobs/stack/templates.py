"""Rendering our config and SQL templates: ``@@NAME@@`` placeholders substituted from the settings."""

from __future__ import annotations

from string import Template

from spark_jobs.jars import INFRA

#: Config templates, rendered into ``<state>/conf`` (``stack.configs.render_configs``).
TEMPLATES = INFRA / "conf"


class Placeholders(Template):
    """``@@NAME@@`` placeholders (string.Template with our delimiter): the templates are Java properties, YAML,
    XML and SQL, where ``$`` and ``${...}`` already mean something (Kafka's config providers, log4j lookups)."""

    delimiter = "@@"
    pattern = r"@@(?:(?P<escaped>(?!))|(?P<named>[A-Z][A-Z0-9_]*)@@|(?P<braced>(?!))|(?P<invalid>(?!)))"  # type: ignore[assignment]  # a str: Template compiles it


def render_template(text: str, values: dict[str, str]) -> str:
    """``text`` with every placeholder substituted; a placeholder without a value is an error naming it."""
    rendered = Placeholders(text).safe_substitute(values)
    if "@@" in rendered:
        start = rendered.index("@@")
        raise ValueError(f"unsubstituted placeholder near {rendered[start:start + 40]!r}")
    return rendered
