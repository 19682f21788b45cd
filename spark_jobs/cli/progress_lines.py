"""A build tool's output, piped in, as a progress bar: ``mvn ... | python -m spark_jobs.cli.progress_lines maven``.

infra/setup.sh runs Maven's resolution and MinIO's ``go install -v`` through it. On a terminal it draws a bar of the
downloads / compiled packages with the elapsed time; otherwise (CI logs, a pipe) it prints the plain lines setup
printed before it. Errors (Maven's ERROR and BUILD lines, anything from go that is not a package or a download)
are printed in both cases. It always exits 0: the caller's ``set -o pipefail`` and checks judge the tool, as before.
"""

from __future__ import annotations

import io
import re
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal, TextIO

import click

from spark_jobs.cli import progress

#: ``count``: the progress a bar shows; ``aux``: a second kind (go's module downloads); ``show``: always printed
#: (errors, Maven's BUILD result); ``drop``: never printed.
Kind = Literal["count", "aux", "show", "drop"]

_MAVEN_KEEP = re.compile(r"Downloaded from|BUILD|ERROR")
# `go install -v` names each package it compiles, an import path alone on its line.
_GO_PACKAGE = re.compile(r"[A-Za-z0-9_.~+/-]+")
#: Off a terminal, go's progress is one line per this many lines.
GO_EVERY = 50


def maven_line(line: str) -> tuple[Kind, str]:
    """What setup shows of a Maven (``-B``) line: downloads count; BUILD and ERROR lines are shown; the rest goes."""
    if not _MAVEN_KEEP.search(line):
        return "drop", line
    text = "  " + re.sub(r"^\[INFO\] ", "", line)
    return ("show" if "BUILD" in line or "ERROR" in line else "count"), text


def go_line(line: str) -> tuple[Kind, str]:
    """A compiled package counts, a module download is ``aux``; anything else (compile errors) is shown."""
    if _GO_PACKAGE.fullmatch(line):
        return "count", line
    if line.startswith("go: downloading "):
        return "aux", line
    return "show", line


@dataclass(frozen=True)
class Tool:
    """How one tool's output reads: which lines are progress, and what is printed of them off a terminal."""

    classify: Callable[[str], tuple[Kind, str]]
    #: Off a terminal: the line to print for the n-th progress line (``count`` or ``aux``), or None.
    plain: Callable[[int, str], str | None]
    counted: str  # what a ``count`` line is, for the bar ("artifacts downloaded")
    aux: str = ""  # what an ``aux`` line is


TOOLS: dict[str, Tool] = {
    "maven": Tool(maven_line, lambda n, text: text, "artifacts downloaded"),
    # As setup's awk before: a line per GO_EVERY lines of progress (packages and module downloads).
    "go": Tool(go_line, lambda n, text: f"  ... {n} packages compiled" if n % GO_EVERY == 0 else None,
               "packages compiled", "modules downloaded"),
}


def follow(lines: Iterable[str], tool: Tool, *, terminal: bool, label: str = "", total: int | None = None,
           out: TextIO | None = None) -> tuple[int, int]:
    """Read ``lines``; return how many were ``count`` and ``aux``. A bar on a ``terminal``, plain lines otherwise."""
    if not terminal:
        return _plain(lines, tool, out or sys.stdout)
    started = time.monotonic()
    counted = aux = 0
    with progress.counting() as bar:
        main = bar.add_task(_describe(label, tool.counted), total=total if total and total > 0 else None)
        second = None
        for line in lines:
            kind, text = tool.classify(line.rstrip("\r\n"))
            if kind == "count":
                counted += 1
                bar.update(main, completed=counted)
            elif kind == "aux":
                aux += 1
                if second is None:
                    second = bar.add_task(_describe(label, tool.aux), total=None)
                bar.update(second, completed=aux)
            elif kind == "show":
                bar.console.print(text, markup=False, emoji=False, highlight=False, soft_wrap=True)
    done = ", ".join(f"{n} {what}" for n, what in ((counted, tool.counted), (aux, tool.aux)) if n)
    if done:
        click.echo(f"  {done} in {time.monotonic() - started:.0f}s", file=out)
    return counted, aux


def _describe(label: str, what: str) -> str:
    return f"{label}: {what}" if label else what


def _plain(lines: Iterable[str], tool: Tool, out: TextIO) -> tuple[int, int]:
    counted = aux = 0
    for line in lines:
        kind, text = tool.classify(line.rstrip("\r\n"))
        if kind in ("count", "aux"):
            counted, aux = (counted + 1, aux) if kind == "count" else (counted, aux + 1)
            shown = tool.plain(counted + aux, text)
            if shown is not None:
                print(shown, file=out, flush=True)
        elif kind == "show":
            print(text, file=out, flush=True)
    return counted, aux


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("tool", type=click.Choice(sorted(TOOLS)))
@click.option("--label", default="", help="what is being built or resolved, before the bar")
@click.option("--total", type=int, default=None, help="expected count, when known (else a pulsing bar)")
def main(tool: str, label: str, total: int | None) -> None:
    """Show TOOL's output on stdin as a progress bar (a terminal) or the plain lines setup prints (otherwise)."""
    if isinstance(sys.stdin, io.TextIOWrapper):
        sys.stdin.reconfigure(errors="replace")  # a stray byte must not stop the pipe
    follow(sys.stdin, TOOLS[tool], terminal=progress.enabled(), label=label, total=total)


if __name__ == "__main__":
    main()
