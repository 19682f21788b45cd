-- Tables with columns large enough to be TOASTed log their full old row.
-- With the DEFAULT identity an unchanged TOASTed column reaches Debezium only
-- as a placeholder; for an ordinary update silver keeps its stored value, but
-- for a primary-key change (delete old key + create new key) there is no
-- stored value under the new key, and the text would be lost. With FULL,
-- Debezium fills the unchanged value from the old row (DBZ-3835). Cost: larger
-- WAL for updates and deletes of these two tables.
ALTER TABLE customers REPLICA IDENTITY FULL;
ALTER TABLE products REPLICA IDENTITY FULL;
