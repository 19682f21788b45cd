-- Debezium heartbeat target. When the shop tables are idle but other databases
-- of the cluster write WAL (Airflow, the metastore), the replication slot can
-- only advance if the captured database sees a change. The connector's
-- heartbeat.action.query upserts this row every heartbeat interval; the table
-- is published (so the change reaches Debezium and its LSN is confirmed) but
-- not in table.include.list (so no topic carries it).
CREATE TABLE lake_heartbeat (
    id    integer     PRIMARY KEY,
    beat  timestamptz NOT NULL
);
GRANT SELECT, INSERT, UPDATE ON lake_heartbeat TO @@CDC_USER@@;
ALTER PUBLICATION lakestream_shop ADD TABLE lake_heartbeat;
