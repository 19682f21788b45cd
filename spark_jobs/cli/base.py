"""What every ``lake`` command shares: the group and command classes, and option types."""

from __future__ import annotations

import sys
from collections.abc import Callable
from datetime import date
from typing import Any

import click

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 110}


class LakeCommand(click.Command):
    """A leaf command. A ``--`` right after the command name is dropped: scripts written for the old
    pass-through CLI call ``lake loadgen events -- --rate 10``."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args[:1] == ["--"]:
            args = args[1:]
        return super().parse_args(ctx, args)


class LakeGroup(click.Group):
    """A command group whose commands and sub-groups are :class:`LakeCommand` / :class:`LakeGroup`."""

    command_class = LakeCommand
    group_class = type  # sub-groups are of this same class


class IsoDate(click.ParamType[date, Any]):
    """A ``YYYY-MM-DD`` day; a wrong value is a usage error naming the option and the format."""

    name = "YYYY-MM-DD"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> date:
        if isinstance(value, date):
            return value
        try:
            return date.fromisoformat(str(value))
        except ValueError:
            self.fail(f"{value!r} is not a day; give YYYY-MM-DD, e.g. 2026-03-10", param, ctx)


ISO_DATE = IsoDate()


def at_least(minimum: int) -> Any:
    """An option callback: the value must be ``>= minimum`` (the message names the option and the bound)."""

    def check(ctx: click.Context, param: click.Parameter, value: int | None) -> int | None:
        if value is not None and value < minimum:
            raise click.BadParameter(f"--{(param.name or '').replace('_', '-')} must be >= {minimum}, got {value}")
        return value

    return check


def comma_list(text: str) -> list[str]:
    """``a, b,,c`` -> ``["a", "b", "c"]``."""
    return [t.strip() for t in text.split(",") if t.strip()]


def _json_stdout(ctx: click.Context, param: click.Parameter, as_json: bool) -> bool:
    if as_json:  # stdout then holds the JSON alone: progress and log lines go to stderr
        from spark_jobs import logs

        logs.progress_to_stderr()
    return as_json


def json_option(help: str = "one JSON object, for scripts") -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The ``--json`` flag of a command (parameter ``as_json``); with it, only the JSON goes to stdout."""
    return click.option("--json", "as_json", is_flag=True, callback=_json_stdout, help=help)


def fail(prog: str, message: object, code: int = 2) -> int:
    """Print ``<prog>: <message>`` on stderr; returns ``code`` for the command to return."""
    click.echo(f"{prog}: {message}", file=sys.stderr)
    return code
