#!/usr/bin/env bash
# `make demo`: the stack is up (make up ran first); run the main job and show where to look.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LAKE="$REPO/.venv/bin/lake"
run_id="demo_$(date -u +%Y%m%dT%H%M%S)"

echo "==> running the smoke job (Spark -> Delta on MinIO -> Hive metastore), run_id=$run_id"
"$LAKE" job smoke --run-id "$run_id" --rows 10

echo "==> reading it back from another Spark process through the shared catalog"
"$LAKE" sql -e "SELECT run_id, count(*) AS rows, sum(square) AS sum_of_squares FROM ops.smoke GROUP BY run_id ORDER BY run_id" 2>/dev/null

eval "$("$REPO/.venv/bin/python" - <<'PY'
from spark_jobs.settings import load_settings
s = load_settings()
print(f"AIRFLOW_URL={s.airflow_url} STATE={s.state_dir} THRIFT={s.host}:{s.thrift_port} MINIO_CONSOLE=http://{s.host}:{s.minio_console_port}")
PY
)"
cat <<MSG

==> where to look
  Airflow UI      $AIRFLOW_URL  (user admin; password = LAKE_AIRFLOW_ADMIN_PASSWORD in $STATE/.env)
                  DAG lake_smoke: unpause it and press Trigger (param rows)
  SQL             .venv/bin/lake sql            (interactive)   or   .venv/bin/lake sql -e 'SELECT * FROM ops.smoke' --format json
  JDBC            jdbc:hive2://$THRIFT/default  (beeline, DBeaver, ...)
  MinIO console   $MINIO_CONSOLE  (root credentials in $STATE/.env)
  Health          .venv/bin/lake stack status
  Logs            $STATE/logs/   (.venv/bin/lake stack logs SERVICE)
  Stop            make down
MSG
