"""The seeded planner: which op comes next, its statements, and its effect on the model."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import replace
from decimal import Decimal

from spark_jobs.loadgen.cdc.model import Item, ShopState
from spark_jobs.loadgen.cdc.plan import Key, Now, Op, Stmt
from spark_jobs.loadgen.cdc.rows import CITIES, COUNTRIES, NAMES, PRODUCT_NAMES, TIERS, RowMaker, order_total, to_json

ORDER_TRANSITIONS: dict[str, tuple[str, ...]] = {
    "pending": ("paid", "cancelled"),
    "paid": ("shipped", "refunded"),
    "shipped": ("refunded",),
    "cancelled": (),
    "refunded": (),
}
OP_WEIGHTS: dict[str, int] = {
    "insert_customer": 10,
    "insert_product": 4,
    "insert_order": 14,
    "order_status": 10,
    "order_twice": 5,
    "order_add_item": 5,
    "item_update": 5,
    "item_delete": 4,
    "order_delete": 3,
    "customer_update": 12,
    "customer_big_notes": 3,
    "product_price": 6,
    "product_update": 4,
    "product_big_description": 2,
    "customer_delete": 3,
    "customer_reinsert": 3,
    "order_reinsert": 2,
    "item_reinsert": 2,
    "customer_pk_change": 2,
    "item_renumber": 2,
    "interleaved": 2,
    "savepoint_rollback": 2,
}
ROLLBACK_PROBABILITY = 0.04
# Every run starts by interleaving these (one in three ops) with random ones, so even a
# short run covers each edge case: deletes come before the re-inserts of their keys.
PRELUDE = (
    "customer_delete", "customer_reinsert", "item_delete", "item_reinsert", "customer_pk_change",
    "customer_big_notes", "customer_update", "order_delete", "order_reinsert", "item_renumber",
    "product_big_description", "product_price", "interleaved", "savepoint_rollback", "order_twice",
)
PRELUDE_EVERY = 3
FORCED_ROLLBACK_AT = 5  # the 5th op (a random one, never a prelude one) is rolled back


class WeightedChooser:
    """Seeded weighted choice over names (cumulative weights, one ``rng.random()`` per pick)."""

    def __init__(self, weights: dict[str, int]) -> None:
        if not weights or any(w < 0 for w in weights.values()) or sum(weights.values()) <= 0:
            raise ValueError(f"weights must be non-negative with a positive sum, got {weights!r}")
        self.names = list(weights)
        self._cum: list[float] = []
        total = 0.0
        for name in self.names:
            total += weights[name]
            self._cum.append(total)
        self._total = total

    def pick(self, rng: random.Random) -> str:
        x = rng.random() * self._total
        for name, edge in zip(self.names, self._cum, strict=True):
            if x < edge:
                return name
        return self.names[-1]


def _rows(table: str, *ids: int) -> frozenset[Key]:
    return frozenset((table, i) for i in ids)


def _item_refs(items: dict[int, Item]) -> frozenset[Key]:
    """The products order items reference (foreign-key parents: they must exist first)."""
    return frozenset(("products", it.product_id) for it in items.values())


Apply = Callable[[], None]  # advances the model as if the op committed


class Planner:
    """Turns ``(rng, state)`` into the next :class:`Op`; pure apart from advancing ``state``.

    ``next_op`` advances ``state`` for ops that commit, so a planner can run
    ahead of (or entirely without) a database.
    """

    def __init__(self, state: ShopState, seed: int, weights: dict[str, int] | None = None, *,
                 prelude: bool = True) -> None:
        self.state = state
        self.rng = random.Random(seed)  # noqa: S311 - a reproducible workload, not a secret
        self.rows = RowMaker(self.rng, state)
        self.chooser = WeightedChooser(weights or OP_WEIGHTS)
        self.prelude = list(PRELUDE) if prelude else []
        self.force_rollback = prelude
        self.count = 0

    def next_op(self) -> Op:
        rng = self.rng
        self.count += 1
        if self.prelude and self.count % PRELUDE_EVERY == 1:
            name = self.prelude.pop(0)
        else:
            name = self.chooser.pick(rng)
        rollback = name not in ("interleaved", "savepoint_rollback") and (
            rng.random() < ROLLBACK_PROBABILITY or (self.force_rollback and self.count == FORCED_ROLLBACK_AT))
        planned: tuple[Op, Apply] | None = getattr(self, f"_plan_{name}")()
        if planned is None:  # not possible in this state (e.g. no orderless customer): insert instead
            planned = self._plan_insert_customer()
        op, apply = planned
        if rollback:
            return replace(op, rollback=True, interleave=(), interleave_at=0)
        apply()
        return op

    # -- helpers
    def _pick_order(self, *, with_items: bool = False, movable: bool = False) -> int | None:
        pool = self.state.order_pool
        for _ in range(8):
            if not pool:
                return None
            oid = pool.choice(self.rng)
            order = self.state.orders[oid]
            if with_items and not order.items:
                continue
            if movable and not ORDER_TRANSITIONS[order.status]:
                continue
            return oid
        return None

    # -- inserts
    def _plan_insert_customer(self) -> tuple[Op, Apply]:
        st = self.state
        cid = st.next_customer_id
        st.next_customer_id += 1
        big = self.rng.random() < 0.15
        stmt = self.rows.customer_insert_stmt(cid, big)
        return Op("insert_customer", (stmt,), writes=_rows("customers", cid)), lambda: st.add_customer(cid, big=big)

    def _plan_insert_product(self) -> tuple[Op, Apply]:
        st, rng = self.state, self.rng
        pid = st.next_product_id
        st.next_product_id += 1
        big = rng.random() < 0.2
        price = self.rows.price()
        desc = self.rows.big_text() if big else (None if rng.random() < 0.3 else self.rows.text(rng.randrange(10, 300)))
        attrs = None if rng.random() < 0.3 else to_json({"origin": rng.choice(CITIES), "weight_g": rng.randrange(10, 5000)})
        stmt = Stmt("insert", "products",
                    "INSERT INTO products (product_id, sku, name, description, price, attributes, active, updated_at) "
                    "VALUES (%s, %s, %s, %s, %s, %s::jsonb, %s, %s)",
                    (pid, f"LG-{self.rows.serial()}", rng.choice(PRODUCT_NAMES), desc, price, attrs, rng.random() < 0.9, Now()),
                    rows=1)
        return Op("insert_product", (stmt,), writes=_rows("products", pid)), lambda: st.add_product(pid, price, big=big)

    def _plan_insert_order(self) -> tuple[Op, Apply] | None:
        st, rng = self.state, self.rng
        if not st.product_pool:
            return None
        oid = st.next_order_id
        st.next_order_id += 1
        stmts: list[Stmt] = []
        new_customer = not st.customers or rng.random() < 0.25
        if new_customer:
            cid = st.next_customer_id
            st.next_customer_id += 1
            stmts.append(self.rows.customer_insert_stmt(cid, False))
        else:
            cid = st.customers.choice(rng)
        order_stmts, order = self.rows.order_insert_stmts(oid, cid, rng.randint(1, 4))
        stmts += order_stmts

        def apply() -> None:
            if new_customer:
                st.add_customer(cid)
            st.add_order(oid, order)

        customer = _rows("customers", cid)
        return Op("insert_order", tuple(stmts), writes=_rows("orders", oid) | (customer if new_customer else frozenset()),
                  reads=_item_refs(order.items) | (frozenset() if new_customer else customer)), apply

    # -- orders
    def _plan_order_status(self) -> tuple[Op, Apply] | None:
        oid = self._pick_order(movable=True)
        if oid is None:
            return None
        order = self.state.orders[oid]
        new = self.rng.choice(ORDER_TRANSITIONS[order.status])

        def apply() -> None:
            order.status = new

        return Op("order_status", (self.rows.status_stmt(oid, new),), writes=_rows("orders", oid)), apply

    def _plan_order_twice(self) -> tuple[Op, Apply] | None:
        """The same order updated twice (or three times) in one transaction."""
        rng = self.rng
        oid = self._pick_order(movable=True)
        if oid is None:
            return None
        order = self.state.orders[oid]
        first = rng.choice(ORDER_TRANSITIONS[order.status])
        stmts = [self.rows.status_stmt(oid, first)]
        final = first
        if ORDER_TRANSITIONS[first]:
            final = rng.choice(ORDER_TRANSITIONS[first])
            stmts.append(self.rows.status_stmt(oid, final))
        note = None if rng.random() < 0.3 else rng.choice(NAMES)
        shipping = None if rng.random() < 0.3 else to_json({"city": rng.choice(CITIES), "tracking": f"TR{rng.randrange(10**9)}"})
        stmts.append(Stmt("update", "orders",
                          "UPDATE orders SET note = %s, shipping = %s::jsonb, updated_at = %s WHERE order_id = %s",
                          (note, shipping, Now(1), oid), rows=1))

        def apply() -> None:
            order.status = final

        return Op("order_twice", tuple(stmts), writes=_rows("orders", oid)), apply

    def _plan_order_add_item(self) -> tuple[Op, Apply] | None:
        st = self.state
        oid = self._pick_order()
        if oid is None or not st.product_pool:
            return None
        order = st.orders[oid]
        line_no = max(order.items, default=0) + 1
        new_item = self.rows.items(1)[1]
        items = {**order.items, line_no: new_item}
        stmts = (self.rows.insert_items_stmt(oid, {line_no: new_item}), self.rows.total_stmt(oid, order_total(items)))

        def apply() -> None:
            order.items[line_no] = new_item
            st.deleted_items.discard((oid, line_no))

        return Op("order_add_item", stmts, writes=_rows("orders", oid), reads=_item_refs({line_no: new_item})), apply

    def _plan_item_update(self) -> tuple[Op, Apply] | None:
        rng = self.rng
        oid = self._pick_order(with_items=True)
        if oid is None:
            return None
        order = self.state.orders[oid]
        line_no = rng.choice(sorted(order.items))
        old = order.items[line_no]
        new = Item(old.product_id, rng.randint(1, 9), old.unit_price,
                   self.rows.discount() if rng.random() < 0.5 else old.discount)
        items = {**order.items, line_no: new}
        stmts = (
            Stmt("update", "order_items",
                 "UPDATE order_items SET quantity = %s, discount = %s WHERE order_id = %s AND line_no = %s",
                 (new.quantity, new.discount, oid, line_no), rows=1),
            self.rows.total_stmt(oid, order_total(items)),
        )

        def apply() -> None:
            order.items[line_no] = new

        return Op("item_update", stmts, writes=_rows("orders", oid)), apply

    def _plan_item_delete(self) -> tuple[Op, Apply] | None:
        st = self.state
        oid = self._pick_order(with_items=True)
        if oid is None:
            return None
        order = st.orders[oid]
        line_no = self.rng.choice(sorted(order.items))
        items = {k: v for k, v in order.items.items() if k != line_no}
        stmts = (
            Stmt("delete", "order_items", "DELETE FROM order_items WHERE order_id = %s AND line_no = %s",
                 (oid, line_no), rows=1),
            self.rows.total_stmt(oid, order_total(items)),
        )

        def apply() -> None:
            del order.items[line_no]
            st.deleted_items.add((oid, line_no))

        return Op("item_delete", stmts, writes=_rows("orders", oid)), apply

    def _plan_order_delete(self) -> tuple[Op, Apply] | None:
        st = self.state
        oid = self._pick_order()
        if oid is None:
            return None
        order = st.orders[oid]
        stmt = Stmt("delete", "orders", "DELETE FROM orders WHERE order_id = %s", (oid,), rows=1,
                    cascade_items=len(order.items))

        def apply() -> None:
            for line_no in order.items:
                st.deleted_items.discard((oid, line_no))
            st.remove_order(oid)

        # Reads its customer: a delete of that customer (possible once it has no orders) must wait for this.
        return Op("order_delete", (stmt,), writes=_rows("orders", oid), reads=_rows("customers", order.customer_id)), apply

    def _plan_order_reinsert(self) -> tuple[Op, Apply] | None:
        """Insert an order (and items) under the key of a deleted order."""
        st, rng = self.state, self.rng
        if not st.deleted_order_pool or not st.customers or not st.product_pool:
            return None
        oid = st.deleted_order_pool.choice(rng)
        cid = st.deleted_orders[oid]
        if cid not in st.customers:
            cid = st.customers.choice(rng)
        stmts, order = self.rows.order_insert_stmts(oid, cid, rng.randint(1, 3))
        return Op("order_reinsert", tuple(stmts), writes=_rows("orders", oid),
                  reads=_rows("customers", cid) | _item_refs(order.items)), lambda: st.add_order(oid, order)

    def _plan_item_reinsert(self) -> tuple[Op, Apply] | None:
        """Insert an order item under the (order_id, line_no) of a deleted one."""
        st = self.state
        if not st.deleted_items or not st.product_pool:
            return None
        oid, line_no = st.deleted_items.choice(self.rng)
        order = st.orders.get(oid)
        if order is None or line_no in order.items:
            return None
        item = self.rows.items(1)[1]
        items = {**order.items, line_no: item}
        stmts = (self.rows.insert_items_stmt(oid, {line_no: item}), self.rows.total_stmt(oid, order_total(items)))

        def apply() -> None:
            order.items[line_no] = item
            st.deleted_items.discard((oid, line_no))

        return Op("item_reinsert", stmts, writes=_rows("orders", oid), reads=_item_refs({line_no: item})), apply

    def _plan_item_renumber(self) -> tuple[Op, Apply] | None:
        """Primary-key changes on order_items: close gaps in line_no, else move the first line last."""
        st = self.state
        oid = self._pick_order(with_items=True)
        if oid is None:
            return None
        order = st.orders[oid]
        lines = sorted(order.items)
        # Ascending single-row updates: the PK is checked per row, so never collide mid-statement.
        moves = [(old, new) for new, old in enumerate(lines, 1) if old != new]
        if not moves:
            moves = [(lines[0], lines[-1] + 1)]
        stmts = tuple(
            Stmt("update", "order_items",
                 "UPDATE order_items SET line_no = %s WHERE order_id = %s AND line_no = %s", (new, oid, old), rows=1)
            for old, new in moves)

        def apply() -> None:
            for old, new in moves:
                order.items[new] = order.items.pop(old)
                st.deleted_items.add((oid, old))
                st.deleted_items.discard((oid, new))

        return Op("item_renumber", stmts, writes=_rows("orders", oid)), apply

    # -- customers
    def _plan_customer_update(self) -> tuple[Op, Apply]:
        """Profile JSONB edits, names, NULL/un-NULL; never touches ``notes`` (the TOAST column)."""
        st, rng = self.state, self.rng
        # Prefer customers with out-of-line notes: their unchanged notes are what Debezium omits.
        cid = st.big_notes.choice(rng) if st.big_notes and rng.random() < 0.4 else st.customers.choice(rng)
        variant = rng.randrange(5)
        if variant == 0:
            stmt = Stmt("update", "customers",
                        "UPDATE customers SET profile = jsonb_set(coalesce(profile, '{}'::jsonb), '{score}', "
                        "to_jsonb(%s::numeric)), updated_at = %s WHERE customer_id = %s",
                        (Decimal(rng.randrange(10000)) / 100, Now(), cid), rows=1)
        elif variant == 1:
            stmt = Stmt("update", "customers", "UPDATE customers SET profile = %s::jsonb, updated_at = %s WHERE customer_id = %s",
                        (self.rows.profile(), Now(), cid), rows=1)
        elif variant == 2:
            stmt = Stmt("update", "customers", "UPDATE customers SET full_name = %s, updated_at = %s WHERE customer_id = %s",
                        (rng.choice(NAMES), Now(), cid), rows=1)
        elif variant == 3:
            stmt = Stmt("update", "customers",
                        "UPDATE customers SET loyalty_tier = %s, country = %s, updated_at = %s WHERE customer_id = %s",
                        (None if rng.random() < 0.5 else rng.choice(TIERS), None if rng.random() < 0.3 else rng.choice(COUNTRIES),
                         Now(), cid), rows=1)
        else:  # touched twice in one transaction
            stmt = Stmt("update", "customers", "UPDATE customers SET loyalty_tier = NULL, updated_at = %s WHERE customer_id = %s",
                        (Now(), cid), rows=1)
            again = Stmt("update", "customers", "UPDATE customers SET loyalty_tier = %s, updated_at = %s WHERE customer_id = %s",
                         (rng.choice(TIERS), Now(1), cid), rows=1)
            return Op("customer_update", (stmt, again), writes=_rows("customers", cid)), lambda: None
        return Op("customer_update", (stmt,), writes=_rows("customers", cid)), lambda: None

    def _plan_customer_big_notes(self) -> tuple[Op, Apply]:
        """Rewrite ``notes`` with a TOAST-size value (or, sometimes, shrink it to NULL)."""
        st, rng = self.state, self.rng
        cid = st.customers.choice(rng)
        to_null = cid in st.big_notes and rng.random() < 0.25
        notes = None if to_null else self.rows.big_text()
        stmt = Stmt("update", "customers", "UPDATE customers SET notes = %s, updated_at = %s WHERE customer_id = %s",
                    (notes, Now(), cid), rows=1)

        def apply() -> None:
            if to_null:
                st.big_notes.discard(cid)
            else:
                st.big_notes.add(cid)

        return Op("customer_big_notes", (stmt,), writes=_rows("customers", cid)), apply

    def _plan_customer_delete(self) -> tuple[Op, Apply] | None:
        st = self.state
        if not st.orderless:
            return None
        cid = st.orderless.choice(self.rng)
        stmt = Stmt("delete", "customers", "DELETE FROM customers WHERE customer_id = %s", (cid,), rows=1)
        return Op("customer_delete", (stmt,), writes=_rows("customers", cid)), lambda: st.remove_customer(cid)

    def _plan_customer_reinsert(self) -> tuple[Op, Apply] | None:
        st = self.state
        if not st.deleted_customers:
            return None
        cid = st.deleted_customers.choice(self.rng)
        big = self.rng.random() < 0.3
        stmt = self.rows.customer_insert_stmt(cid, big)
        return Op("customer_reinsert", (stmt,), writes=_rows("customers", cid)), lambda: st.add_customer(cid, big=big)

    def _plan_customer_pk_change(self) -> tuple[Op, Apply] | None:
        """``UPDATE customers SET customer_id = new``: Debezium sends a delete of the old key and a create."""
        st = self.state
        if not st.orderless:
            return None
        old = st.orderless.choice(self.rng)
        new = st.next_customer_id
        st.next_customer_id += 1
        stmt = Stmt("update", "customers", "UPDATE customers SET customer_id = %s, updated_at = %s WHERE customer_id = %s",
                    (new, Now(), old), rows=1)

        def apply() -> None:
            big = old in st.big_notes
            st.remove_customer(old)
            st.add_customer(new, big=big)

        return Op("customer_pk_change", (stmt,), writes=_rows("customers", old, new)), apply

    # -- products
    def _plan_product_price(self) -> tuple[Op, Apply] | None:
        st, rng = self.state, self.rng
        if not st.product_pool:
            return None
        pid = st.big_descriptions.choice(rng) if st.big_descriptions and rng.random() < 0.4 else st.product_pool.choice(rng)
        price = self.rows.price()
        stmt = Stmt("update", "products", "UPDATE products SET price = %s, updated_at = %s WHERE product_id = %s",
                    (price, Now(), pid), rows=1)

        def apply() -> None:
            st.products[pid] = price

        return Op("product_price", (stmt,), writes=_rows("products", pid)), apply

    def _plan_product_update(self) -> tuple[Op, Apply] | None:
        st, rng = self.state, self.rng
        if not st.product_pool:
            return None
        pid = st.product_pool.choice(rng)
        attrs = None if rng.random() < 0.3 else to_json({"origin": rng.choice(CITIES), "tags": rng.sample(NAMES, 2)})
        stmt = Stmt("update", "products",
                    "UPDATE products SET name = %s, attributes = %s::jsonb, active = %s, updated_at = %s WHERE product_id = %s",
                    (rng.choice(PRODUCT_NAMES), attrs, rng.random() < 0.8, Now(), pid), rows=1)
        return Op("product_update", (stmt,), writes=_rows("products", pid)), lambda: None

    def _plan_product_big_description(self) -> tuple[Op, Apply] | None:
        st = self.state
        if not st.product_pool:
            return None
        pid = st.product_pool.choice(self.rng)
        stmt = Stmt("update", "products", "UPDATE products SET description = %s, updated_at = %s WHERE product_id = %s",
                    (self.rows.big_text(), Now(), pid), rows=1)
        return Op("product_big_description", (stmt,), writes=_rows("products", pid)), lambda: st.big_descriptions.add(pid)

    # -- concurrency and partial rollback
    def _plan_interleaved(self) -> tuple[Op, Apply] | None:
        """Tx A updates a product price and an order; tx B (second connection) starts later, commits first.

        B inserts a new order whose items reference A's product: B's foreign-key
        check takes KEY SHARE, compatible with A's no-key update, so neither waits.
        """
        st, rng = self.state, self.rng
        oid_a = self._pick_order(movable=True)
        if oid_a is None or not st.product_pool or not st.customers:
            return None
        pid = st.product_pool.choice(rng)
        price = self.rows.price()
        order_a = st.orders[oid_a]
        status = rng.choice(ORDER_TRANSITIONS[order_a.status])
        a_stmts = (
            Stmt("update", "products", "UPDATE products SET price = %s, updated_at = %s WHERE product_id = %s",
                 (price, Now(), pid), rows=1),
            self.rows.status_stmt(oid_a, status),
        )
        oid_b = st.next_order_id
        st.next_order_id += 1
        b_stmts, order_b = self.rows.order_insert_stmts(oid_b, st.customers.choice(rng), rng.randint(1, 3))

        def apply() -> None:
            st.add_order(oid_b, order_b)
            st.products[pid] = price
            order_a.status = status

        return Op("interleaved", a_stmts, interleave=tuple(b_stmts), interleave_at=1,
                  writes=_rows("products", pid) | _rows("orders", oid_a, oid_b),
                  reads=_rows("customers", order_b.customer_id) | _item_refs(order_b.items)), apply

    def _plan_savepoint_rollback(self) -> tuple[Op, Apply] | None:
        """Changes undone by ROLLBACK TO SAVEPOINT inside a transaction that commits."""
        st, rng = self.state, self.rng
        if not st.customers:
            return None
        cid = st.customers.choice(rng)
        ghost = st.next_customer_id
        st.next_customer_id += 1
        stmts: list[Stmt] = [
            Stmt("update", "customers", "UPDATE customers SET loyalty_tier = %s, updated_at = %s WHERE customer_id = %s",
                 (rng.choice(TIERS), Now(), cid), rows=1),
            Stmt("savepoint", "", "SAVEPOINT lg_sp"),
            self.rows.customer_insert_stmt(ghost, False),
            Stmt("update", "customers", "UPDATE customers SET full_name = %s, updated_at = %s WHERE customer_id = %s",
                 ("never committed", Now(1), cid), rows=1),
            Stmt("rollback_to_savepoint", "", "ROLLBACK TO SAVEPOINT lg_sp"),
            Stmt("update", "customers", "UPDATE customers SET full_name = %s, updated_at = %s WHERE customer_id = %s",
                 (rng.choice(NAMES), Now(2), cid), rows=1),
        ]
        return Op("savepoint_rollback", tuple(stmts), writes=_rows("customers", cid, ghost)), lambda: None


def plan_ops(state: ShopState, seed: int, n: int) -> list[Op]:
    """The first ``n`` ops for ``seed`` from ``state`` (advances ``state``), without a database."""
    planner = Planner(state, seed)
    return [planner.next_op() for _ in range(n)]
