-- Least privilege for Debezium's role (@@CDC_USER@@: LOGIN REPLICATION, not a
-- superuser). The publication is created here by the stack's superuser and is
-- limited to the shop tables, so the connector runs with
-- publication.autocreate.mode=disabled and needs no table ownership.
GRANT USAGE ON SCHEMA public TO @@CDC_USER@@;
GRANT SELECT ON customers, products, orders, order_items TO @@CDC_USER@@;
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES TO @@CDC_USER@@;
CREATE PUBLICATION lakestream_shop FOR TABLE customers, products, orders, order_items;
