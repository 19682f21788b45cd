#!/usr/bin/env bash
# `make demo`: the product tour. The stack is up (make up ran first). Registers the CDC connector,
# starts the streaming app, writes 7 days of shop history plus a short live load, waits until the
# stream has it all, backfills the gold star schema for those days through Airflow (the runs stay
# visible in the UI), then prints what the lake holds and where to look. Idempotent: a re-run reuses
# the history written for the same 7 days.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LAKE="$REPO/.venv/bin/lake"
PY="$REPO/.venv/bin/python"
DAYS=7
SECONDS=0
step() { printf '\n==> [%3ds] %s\n' "$SECONDS" "$*"; }

eval "$("$PY" - <<'PY'
from spark_jobs.settings import load_settings
s = load_settings()
print(f"AIRFLOW_URL={s.airflow_url} STATE={s.state_dir} THRIFT={s.host}:{s.thrift_port} "
      f"MINIO_CONSOLE=http://{s.host}:{s.minio_console_port} DQ_DOCS=http://{s.host}:{s.dq_docs_port}/")
PY
)"
first="$(date -u -d "-$DAYS days" +%F)"
last="$(date -u -d "-1 day" +%F)"

step "registering the Debezium connector (PostgreSQL shop -> Kafka)"
"$LAKE" connectors apply

step "starting the streaming app (Kafka -> bronze -> silver, hot, quarantine)"
"$LAKE" stream start

marker="$STATE/demo/history-$first-$last"
if [ -f "$marker" ]; then
  step "history for $first .. $last already written ($(cat "$marker")); reusing it"
else
  step "writing $DAYS days of shop history ($first .. $last) through PostgreSQL and Kafka"
  seed=1
  while true; do
    set +e; out="$("$LAKE" loadgen history --days "$DAYS" --seed "$seed" 2>&1)"; rc=$?; set -e
    if [ $rc -eq 0 ]; then echo "$out"; break; fi
    if [ $rc -eq 2 ] && [ $seed -lt 50 ] && grep -q "make clean" <<<"$out"; then seed=$((seed + 1)); continue; fi
    echo "$out" >&2; exit $rc
  done
  mkdir -p "$STATE/demo" && echo "seed $seed" > "$marker"
fi

step "a short live load: 15 s of OLTP changes and clickstream (late, duplicate and malformed records included)"
"$LAKE" loadgen cdc --rate 200 --duration 15 --seed "$(date +%s)" &
cdc_pid=$!
"$LAKE" loadgen events --rate 500 --duration 15 --seed "$(date +%s)" --users-from-db --late 0.05 --dup 0.02 --bad 0.01
wait "$cdc_pid"

step "waiting until the stream has every committed change and event"
"$LAKE" stream wait --timeout 900

step "backfilling gold for $first .. $last through Airflow (POST /api/v2/backfills; watch it in the UI)"
"$LAKE" gold backfill --start "$first" --end "$last" --reprocess completed

step "unpausing lake_dq_streaming (data-quality checks of silver and hot tables every 10 minutes)"
"$PY" - <<'PY'
from spark_jobs.stack.airflow_api import AirflowClient
from spark_jobs.settings import load_settings

client = AirflowClient(load_settings())
client.wait_for_dag("lake_dq_streaming")
client.unpause("lake_dq_streaming")
print("  lake_dq_streaming unpaused")
PY

step "what the lake holds"
"$PY" -m spark_jobs.jobs.demo_summary "$first" "$last" 2>/dev/null

cat <<MSG

==> demo done in ${SECONDS}s. Where to look:
  Airflow UI      $AIRFLOW_URL  (user admin; password = LAKE_AIRFLOW_ADMIN_PASSWORD in $STATE/.env)
                  DAG lake_gold_daily: the backfill's runs; Trigger -> Backfill for more days
                  DAG lake_dq_streaming: data-quality checks of silver and hot tables
  SQL             .venv/bin/lake sql -e "SELECT * FROM gold.fct_daily_sales ORDER BY order_date DESC LIMIT 10"
                  .venv/bin/lake sql -e "SELECT * FROM hot.sales_per_minute ORDER BY window_start DESC LIMIT 5"
                  .venv/bin/lake sql -e "SELECT customer_id, country, loyalty_tier, valid_from, valid_to, is_current
                                         FROM gold.dim_customers WHERE customer_id IN
                                         (SELECT customer_id FROM gold.dim_customers GROUP BY 1 HAVING count(*) > 2)"
                  .venv/bin/lake sql -e "DESCRIBE HISTORY gold.fct_orders"
                  .venv/bin/lake sql -e "SELECT count(*) FROM gold.fct_orders VERSION AS OF 0"
                  .venv/bin/lake sql -e "SELECT * FROM silver.orders ORDER BY updated_at DESC LIMIT 5"
  Data quality    .venv/bin/lake dq status  |  .venv/bin/lake dq history    Data Docs: $DQ_DOCS
  JDBC            jdbc:hive2://$THRIFT/default  user lake, password LAKE_THRIFT_PASSWORD in $STATE/.env
                  (beeline -n lake -w $STATE/secrets/thrift-password; DBeaver, ...)
  MinIO console   $MINIO_CONSOLE  (root credentials in $STATE/.env)
  Health          .venv/bin/lake stack status  |  .venv/bin/lake stream status
  Logs            $STATE/logs/   (.venv/bin/lake stack logs SERVICE)
  Stop            make down
MSG
