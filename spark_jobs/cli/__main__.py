"""``python -m spark_jobs.cli``: the ``lake`` command (as root, it first becomes the service user)."""

from spark_jobs.cli import entry

raise SystemExit(entry())
