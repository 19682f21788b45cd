"""Airflow local settings of the Lakestream stack (this directory is on the Airflow services' PYTHONPATH).

The scheduler imports the lake's task modules before its LocalExecutor forks (see
spark_jobs/stack/airflow_preload.py); every other Airflow process leaves them alone.
"""

import sys

from spark_jobs.stack.airflow_preload import is_scheduler, preload

if is_scheduler(sys.argv):
    preload()
