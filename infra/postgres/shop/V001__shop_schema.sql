-- The shop OLTP source: what Debezium captures. Applied once by `lake stack up`
-- (recorded in public.lake_schema_migrations). Columns exercise the CDC edge
-- cases on purpose: NUMERIC money, timestamptz, NULLs, JSONB, a large TEXT that
-- PostgreSQL TOASTs, non-ASCII text, a composite primary key.

CREATE TABLE customers (
    customer_id   bigint PRIMARY KEY,
    email         text        NOT NULL UNIQUE,
    full_name     text        NOT NULL,
    country       char(2),
    loyalty_tier  text,
    profile       jsonb,
    notes         text,                     -- large, TOASTed when long
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE products (
    product_id    bigint PRIMARY KEY,
    sku           text          NOT NULL UNIQUE,
    name          text          NOT NULL,
    description   text,                     -- large, TOASTed when long
    price         numeric(12,2) NOT NULL CHECK (price >= 0),
    attributes    jsonb,
    active        boolean       NOT NULL DEFAULT true,
    updated_at    timestamptz   NOT NULL DEFAULT now()
);

CREATE TABLE orders (
    order_id      bigint PRIMARY KEY,
    customer_id   bigint        NOT NULL REFERENCES customers (customer_id),
    status        text          NOT NULL CHECK (status IN ('pending', 'paid', 'shipped', 'cancelled', 'refunded')),
    currency      char(3)       NOT NULL DEFAULT 'EUR',
    total         numeric(14,2) NOT NULL DEFAULT 0,
    shipping      jsonb,
    note          text,
    placed_at     timestamptz   NOT NULL DEFAULT now(),
    updated_at    timestamptz   NOT NULL DEFAULT now()
);

CREATE TABLE order_items (
    order_id      bigint        NOT NULL REFERENCES orders (order_id) ON DELETE CASCADE,
    line_no       integer       NOT NULL,
    product_id    bigint        NOT NULL REFERENCES products (product_id),
    quantity      integer       NOT NULL CHECK (quantity > 0),
    unit_price    numeric(12,2) NOT NULL,
    discount      numeric(5,4),
    PRIMARY KEY (order_id, line_no)
);

CREATE INDEX orders_customer_idx ON orders (customer_id);
CREATE INDEX order_items_product_idx ON order_items (product_id);

-- A few rows that exist before any connector starts (the initial snapshot).
INSERT INTO customers (customer_id, email, full_name, country, loyalty_tier, profile, notes) VALUES
    (1, 'ana@example.com',   'Ana Müller',      'DE', 'gold',   '{"newsletter": true, "langs": ["de", "en"]}', NULL),
    (2, 'jose@example.com',  'José Álvarez',    'ES', NULL,     '{"newsletter": false}',                     repeat('Nota larga ', 900)),
    (3, 'yuki@example.com',  '佐藤 由紀',        'JP', 'silver', NULL,                                         'short note');
INSERT INTO products (product_id, sku, name, description, price, attributes) VALUES
    (10, 'SKU-10', 'Kaffeebohnen 1 kg', repeat('Röstung ', 1200), 18.90, '{"origin": "Perú"}'),
    (11, 'SKU-11', 'Teekanne',          'Glas, 1.2 l',              24.00, NULL),
    (12, 'SKU-12', 'Gift card',         NULL,                       50.00, '{"digital": true}');
INSERT INTO orders (order_id, customer_id, status, total, shipping) VALUES
    (100, 1, 'paid',    37.80, '{"city": "Köln"}'),
    (101, 3, 'pending', 24.00, NULL);
INSERT INTO order_items (order_id, line_no, product_id, quantity, unit_price, discount) VALUES
    (100, 1, 10, 2, 18.90, NULL),
    (101, 1, 11, 1, 24.00, 0.0500);
