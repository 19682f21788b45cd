-- The seeded order 101 had total 24.00 while its one line is 1 x 24.00 with a 5% discount: 22.80 by the
-- shop's rule (sum of each line's quantity * unit_price * (1 - discount), rounded to cents half-even).
-- The data-quality suites check that rule, so a clean shop must satisfy it.
UPDATE orders SET total = 22.80, updated_at = now() WHERE order_id = 101 AND total = 24.00;
