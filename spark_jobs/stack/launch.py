"""Exec a supervised program with its environment read from a private JSON file.

Keeps secrets out of ``supervisord.conf`` (and out of its quoting rules):
``python -m spark_jobs.stack.launch ENV_JSON -- COMMAND ARGS...``
"""

from __future__ import annotations

import json
import os
import sys


def main(argv: list[str]) -> None:
    if len(argv) < 3 or argv[1] != "--":
        sys.exit("usage: python -m spark_jobs.stack.launch ENV_JSON -- COMMAND [ARGS...]")
    env_file, command = argv[0], argv[2:]
    with open(env_file, encoding="utf-8") as fh:
        env = json.load(fh)
    os.execvpe(command[0], command, {**os.environ, **env})  # noqa: S606 - our own configured command


if __name__ == "__main__":
    main(sys.argv[1:])
