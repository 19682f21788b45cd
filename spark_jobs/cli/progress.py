"""Progress bars (rich) for long commands: on a terminal only, so CI logs and pipes stay plain lines."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


def enabled() -> bool:
    """Bars only when a person watches: stdout and stderr are a terminal (while a bar runs, rich moves what is
    printed above it, so a redirected stdout would lose lines to the terminal)."""
    return sys.stdout.isatty() and sys.stderr.isatty()


def _progress() -> Progress:
    # Log lines written while the bar is live go above it (rich redirects sys.stdout/sys.stderr meanwhile).
    return Progress(TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(), TimeElapsedColumn(),
                    TimeRemainingColumn(), console=Console(stderr=True), transient=True)


def counting() -> Progress:
    """Bars that count items (``done/total``, or ``done/?`` pulsing when the total is unknown) with elapsed time."""
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=Console(stderr=True), transient=True)


@contextmanager
def steps(description: str, total: float) -> Iterator[Callable[[float], None]]:
    """A bar of ``total`` steps; yields ``update(done)``. A no-op off a terminal."""
    if not enabled() or total <= 0:
        yield lambda done: None
        return
    with _progress() as bar:
        task = bar.add_task(description, total=total)
        yield lambda done: bar.update(task, completed=done)


@contextmanager
def remaining(description: str) -> Iterator[Callable[[int], None]]:
    """A bar for work that shrinks (records still to apply); yields ``left(n)``. Its total is the largest ``n``
    seen. A no-op off a terminal."""
    if not enabled():
        yield lambda n: None
        return
    with _progress() as bar:
        task = bar.add_task(description, total=None)
        most = 0

        def left(n: int) -> None:
            nonlocal most
            most = max(most, n)
            bar.update(task, total=most or 1, completed=most - n if most else 1)

        yield left


@contextmanager
def timed(description: str, seconds: float) -> Iterator[None]:
    """A bar that fills over ``seconds`` of wall time (a paced load of known duration). A no-op off a terminal."""
    if not enabled() or seconds <= 0:
        yield
        return
    stop = threading.Event()
    with _progress() as bar:
        task = bar.add_task(description, total=seconds)
        t0 = time.monotonic()

        def tick() -> None:
            while not stop.wait(0.25):
                bar.update(task, completed=min(seconds, time.monotonic() - t0))

        ticker = threading.Thread(target=tick, name="progress", daemon=True)
        ticker.start()
        try:
            yield
        finally:
            stop.set()
            ticker.join()
