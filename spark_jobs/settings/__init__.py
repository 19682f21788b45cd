"""One frozen, typed settings object for every Lakestream process.

Values come from ``LAKE_*`` environment variables, then from the generated,
git-ignored ``<state dir>/.env`` (secrets made by ``lake stack up``), then from
the model's defaults. ``.env.example`` is rendered from the model
(``python -m spark_jobs.settings.env_example``), and a unit test keeps it so.

Endpoints (Spark master, Kafka bootstrap, S3, metastore, Airflow) are read only
from here, so the same code runs against the local stack or a cluster.
"""

from spark_jobs.settings.load import load_settings
from spark_jobs.settings.model import REPO_ROOT, SECRET_NAMES, Settings, defaults
from spark_jobs.settings.validation import (
    CLUSTER_APPS,
    EXECUTOR_MEMORY_MB,
    PORT_NAMES,
    STREAM_QUERIES,
    SettingsError,
    env_name,
)

__all__ = ["CLUSTER_APPS", "EXECUTOR_MEMORY_MB", "PORT_NAMES", "REPO_ROOT", "SECRET_NAMES", "STREAM_QUERIES",
           "Settings", "SettingsError", "defaults", "env_name", "load_settings"]
