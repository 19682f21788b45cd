"""How lake's messages reach the user: library modules log, entry points call :func:`setup` once.

Convention: a module logs with ``log = logging.getLogger(__name__)`` and never prints; a command's result
(tables, summaries, JSON) is the CLI's own output (``click.echo``). :func:`setup` shows ``spark_jobs.*``
records as plain lines, the same text the commands printed before they logged: INFO on stdout, WARNING and
above on stderr prefixed ``WARNING:`` / ``ERROR:``. Other libraries' loggers show WARNING and above only.
Inside Airflow tasks nothing calls :func:`setup`: Airflow's own handlers put the records in the task log.
"""

from __future__ import annotations

import logging
import sys

#: The package whose records :func:`setup` shows at INFO (or DEBUG with ``verbose``).
PACKAGE = "spark_jobs"


class _Formatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        return text if record.levelno < logging.WARNING else f"{record.levelname}: {text}"


class ConsoleHandler(logging.Handler):
    """INFO and below to stdout (or stderr when ``info_to_stderr``), WARNING and above to stderr.

    The stream is looked up per record, so a redirected ``sys.stdout`` (pytest's capture, a script's) is honoured.
    """

    def __init__(self, info_to_stderr: bool = False) -> None:
        super().__init__()
        self.info_to_stderr = info_to_stderr
        self.setFormatter(_Formatter("%(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            stream = sys.stderr if self.info_to_stderr or record.levelno >= logging.WARNING else sys.stdout
            stream.write(self.format(record) + "\n")
            stream.flush()
        except Exception:  # noqa: BLE001 - logging's own contract: a broken stream must not break the caller
            self.handleError(record)


def setup(verbose: bool = False, *, info_to_stderr: bool = False) -> None:
    """Show lake's records on the console (idempotent: a second call replaces the first's handler).

    ``verbose``: DEBUG records of lake too. ``info_to_stderr``: progress to stderr, for commands whose stdout
    is a machine-readable result (``--json``).
    """
    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, ConsoleHandler)]:
        root.removeHandler(handler)
    root.addHandler(ConsoleHandler(info_to_stderr))
    root.setLevel(logging.WARNING)
    level = logging.DEBUG if verbose else logging.INFO
    logging.getLogger(PACKAGE).setLevel(level)
    # A module run as ``python -m spark_jobs.<module>`` (or a spark-submit'ed file) logs as ``__main__``.
    logging.getLogger("__main__").setLevel(level)


def progress_to_stderr() -> None:
    """Move INFO records to stderr (a command that prints JSON on stdout), keeping the level set by :func:`setup`."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler, ConsoleHandler):
            handler.info_to_stderr = True
