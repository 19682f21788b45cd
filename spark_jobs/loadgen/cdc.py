"""Seeded random OLTP workload against the ``shop`` database (``lake loadgen cdc``).

The workload exercises every CDC edge case the streaming app must survive:
multi-table transactions (an order, its items and the order total in one
commit), updates that leave the large TOASTed text untouched and updates that
rewrite it (> 8 KB of poorly compressible text, so PostgreSQL stores it out of
line), JSONB edits, NULLing and un-NULLing, non-ASCII text, deletes (also
cascading ones), re-inserts of deleted primary keys, primary-key changes, the
same row touched several times in one transaction, two transactions
interleaved on two connections (the one started last commits first), partial
rollbacks to a savepoint and whole transactions rolled back.

Determinism: :func:`load_state` reads the keys that exist (ordered), then
:class:`Planner` turns ``(random.Random(seed), model)`` into concrete
:class:`Op` values (SQL and parameters) without touching the database; the
executor only runs them. The same seed on the same starting rows therefore
gives the same operation sequence, which :func:`plan_digest` summarises.
Several sessions (``--connections``) run the ops concurrently: each op names
the rows it writes and the foreign-key parents it reads, and
:class:`Scheduler` keeps ops on the same rows in plan order, so the rows left
behind are the plan's whatever the interleaving (one session was the limit:
~1,500 commits/s with the stream idle, below 1,000/s beside it).
Every run opens with a fixed prelude of edge-case ops (one op in three, see
``PRELUDE``) and rolls back its 5th op, so even a few hundred changes cover
every case; after that ops are drawn by ``OP_WEIGHTS``.
Only timestamps come from the wall clock (``Now`` placeholders in the plan).

A "change" is one row-level insert, update or delete, counting rows deleted by
``ON DELETE CASCADE``. Pacing and ``--max-changes`` count committed changes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

if TYPE_CHECKING:
    from psycopg2.extensions import connection as PgConnection
    from psycopg2.extensions import cursor as PgCursor

    from spark_jobs.settings import Settings

TABLES = ("customers", "products", "orders", "order_items")
DEFAULT_CONNECTIONS = 4  # sessions running ops at once (see Scheduler); 1 gives the plan's commit order
NEW_ID_FLOOR = 1000  # new rows get ids above this; the seeded snapshot rows stay recognisable
BIG_TEXT_CHARS = 12_000  # > 8 KB even in ASCII, and too random for pglz: stored out of line
CENT = Decimal("0.01")
ORDER_TRANSITIONS: dict[str, tuple[str, ...]] = {
    "pending": ("paid", "cancelled"),
    "paid": ("shipped", "refunded"),
    "shipped": ("refunded",),
    "cancelled": (),
    "refunded": (),
}
NAMES = (
    "Zoë Ångström", "東京 太郎", "José Álvarez", "Ana Müller", "Łukasz Żółć", "Ђорђе Петровић",
    "محمد الأحمد", "Søren Kierkegård", "Nguyễn Văn A", "🚀 Rocket Café", "O'Brien \"Bob\"", "Çağla Öztürk",
    "Ελένη Παπαδοπούλου", "이서연", "François d'Hérouville", "e\u0301clair (combining)", "Ñandú 🦜",
)
PRODUCT_NAMES = (
    "Kaffeebohnen 500 g", "Teekanne 🫖", "Crème brûlée set", "東京 green tea", "Gift card 🎁", "Wasserkocher",
    "Smørrebrød board", "Ćevapi grill", "Café au lait mug", "Ω-3 capsules",
)
CITIES = ("Köln", "Zürich", "São Paulo", "東京", "Kraków", "Reykjavík", "Montréal", "Łódź")
COUNTRIES = ("DE", "ES", "JP", "FR", "PL", "BR", "IS", "CH", "VN")
TIERS = ("bronze", "silver", "gold", "platinum")
CURRENCIES = ("EUR", "EUR", "EUR", "USD", "JPY", "CHF")
# Poorly compressible on purpose (see BIG_TEXT_CHARS); includes multi-byte characters.
TEXT_ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,;äöüßéèñçøåłżœ東京語€✓"

ChangeKind = Literal["insert", "update", "delete"]
Key = tuple[str, int]  # ("customers", 1001): a row the scheduler orders ops on
StmtKind = Literal["insert", "update", "delete", "savepoint", "rollback_to_savepoint"]


class LoadgenError(RuntimeError):
    """The workload could not run; the message says what to do."""


# --------------------------------------------------------------------------- plan values


@dataclass(frozen=True)
class Now:
    """Placeholder for the transaction's wall-clock time (+ offset), resolved when executed."""

    offset_us: int = 0


@dataclass(frozen=True)
class Stmt:
    """One SQL statement and the rows it must change (checked against ``cursor.rowcount``)."""

    kind: StmtKind
    table: str
    sql: str
    params: tuple[Any, ...] = ()
    rows: int = 0
    cascade_items: int = 0  # order_items removed by ON DELETE CASCADE (deletes of orders)


@dataclass(frozen=True)
class Op:
    """One planned transaction.

    ``interleave`` runs on a second connection after ``statements[:interleave_at]``
    and commits before the rest of ``statements``: two concurrent transactions
    whose commit order differs from their start order.
    """

    name: str
    statements: tuple[Stmt, ...]
    rollback: bool = False
    interleave: tuple[Stmt, ...] = ()
    interleave_at: int = 0
    writes: frozenset[Key] = frozenset()  # rows the op inserts, updates or deletes (an order stands for its items)
    reads: frozenset[Key] = frozenset()  # rows it needs to exist: foreign-key parents it does not change

    def committed_changes(self) -> int:
        """Row changes this op leaves behind when it commits (0 for a rolled-back op)."""
        if self.rollback:
            return 0
        return sum(n for _, _, n, committed in iter_changes(self) if committed)

    def signature(self) -> str:
        """Stable text of the whole plan (for determinism checks)."""
        parts = [self.name, "R" if self.rollback else "C", str(self.interleave_at)]
        for s in (*self.statements, *self.interleave):
            parts.append(f"{s.kind}|{s.table}|{s.sql}|{s.params!r}|{s.rows}|{s.cascade_items}")
        return "\n".join(parts)


def iter_changes(op: Op) -> Iterator[tuple[str, ChangeKind, int, bool]]:
    """``(table, kind, rows, survives_savepoints)`` for every row change in ``op``.

    ``survives_savepoints`` is False for changes undone by ``ROLLBACK TO SAVEPOINT``.
    """
    for stmts in (op.statements, op.interleave):
        pending: list[tuple[str, ChangeKind, int]] = []
        marks: list[int] = []
        for s in stmts:
            if s.kind == "savepoint":
                marks.append(len(pending))
            elif s.kind == "rollback_to_savepoint":
                start = marks.pop()
                for table, kind, n in pending[start:]:
                    yield table, kind, n, False
                del pending[start:]
            else:
                pending.append((s.table, s.kind, s.rows))
                if s.cascade_items:
                    pending.append(("order_items", "delete", s.cascade_items))
        for table, kind, n in pending:
            yield table, kind, n, True


def plan_digest(ops: Sequence[Op]) -> str:
    """SHA-256 over the signatures of ``ops``, in order."""
    h = hashlib.sha256()
    for op in ops:
        h.update(op.signature().encode("utf-8"))
        h.update(b"\x00")
    return h.hexdigest()


# --------------------------------------------------------------------------- the model


T = TypeVar("T")


class Pool(Generic[T]):
    """A set with O(1) add, remove and seeded random choice (deterministic iteration order)."""

    def __init__(self, items: Sequence[T] = ()) -> None:
        self._items: list[T] = []
        self._pos: dict[T, int] = {}
        for item in items:
            self.add(item)

    def add(self, item: T) -> None:
        if item not in self._pos:
            self._pos[item] = len(self._items)
            self._items.append(item)

    def discard(self, item: T) -> None:
        pos = self._pos.pop(item, None)
        if pos is None:
            return
        last = self._items.pop()
        if pos < len(self._items):
            self._items[pos] = last
            self._pos[last] = pos

    def choice(self, rng: random.Random) -> T:
        return self._items[rng.randrange(len(self._items))]

    def __contains__(self, item: object) -> bool:
        return item in self._pos

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[T]:
        return iter(list(self._items))


@dataclass
class Item:
    product_id: int
    quantity: int
    unit_price: Decimal
    discount: Decimal | None


@dataclass
class Order:
    customer_id: int
    status: str
    items: dict[int, Item] = field(default_factory=dict)


@dataclass
class ShopState:
    """What the planner knows about the shop rows: keys, references, prices, statuses.

    Built from the database once (:func:`load_state`), then advanced by the
    planner as if every planned op commits (rolled-back ops leave it as is).
    """

    customers: Pool[int] = field(default_factory=Pool)
    customer_orders: dict[int, int] = field(default_factory=dict)  # customer_id -> number of orders
    orderless: Pool[int] = field(default_factory=Pool)
    big_notes: Pool[int] = field(default_factory=Pool)  # customers whose notes are TOAST-sized
    products: dict[int, Decimal] = field(default_factory=dict)  # product_id -> price
    product_pool: Pool[int] = field(default_factory=Pool)
    big_descriptions: Pool[int] = field(default_factory=Pool)
    orders: dict[int, Order] = field(default_factory=dict)
    order_pool: Pool[int] = field(default_factory=Pool)
    deleted_customers: Pool[int] = field(default_factory=Pool)
    deleted_orders: dict[int, int] = field(default_factory=dict)  # order_id -> its customer_id
    deleted_order_pool: Pool[int] = field(default_factory=Pool)
    deleted_items: Pool[tuple[int, int]] = field(default_factory=Pool)
    next_customer_id: int = NEW_ID_FLOOR + 1
    next_product_id: int = NEW_ID_FLOOR + 1
    next_order_id: int = NEW_ID_FLOOR + 1
    serial: int = 0  # makes generated e-mails and SKUs unique across runs

    # -- customers
    def add_customer(self, cid: int, *, big: bool = False, n_orders: int = 0) -> None:
        self.customers.add(cid)
        self.customer_orders[cid] = n_orders
        if n_orders == 0:
            self.orderless.add(cid)
        if big:
            self.big_notes.add(cid)
        self.deleted_customers.discard(cid)
        self.next_customer_id = max(self.next_customer_id, cid + 1)

    def remove_customer(self, cid: int) -> None:
        self.customers.discard(cid)
        self.orderless.discard(cid)
        self.big_notes.discard(cid)
        del self.customer_orders[cid]
        self.deleted_customers.add(cid)

    # -- products
    def add_product(self, pid: int, price: Decimal, *, big: bool = False) -> None:
        self.products[pid] = price
        self.product_pool.add(pid)
        if big:
            self.big_descriptions.add(pid)
        self.next_product_id = max(self.next_product_id, pid + 1)

    # -- orders
    def add_order(self, oid: int, order: Order) -> None:
        self.orders[oid] = order
        self.order_pool.add(oid)
        n = self.customer_orders[order.customer_id]
        self.customer_orders[order.customer_id] = n + 1
        self.orderless.discard(order.customer_id)
        self.deleted_order_pool.discard(oid)
        self.deleted_orders.pop(oid, None)
        for line_no in order.items:
            self.deleted_items.discard((oid, line_no))
        self.next_order_id = max(self.next_order_id, oid + 1)

    def remove_order(self, oid: int) -> None:
        order = self.orders.pop(oid)
        self.order_pool.discard(oid)
        n = self.customer_orders[order.customer_id] - 1
        self.customer_orders[order.customer_id] = n
        if n == 0:
            self.orderless.add(order.customer_id)
        self.deleted_orders[oid] = order.customer_id
        self.deleted_order_pool.add(oid)

    def snapshot(self) -> dict[str, Any]:
        """A comparable summary (for checking the model against the database)."""
        return {
            "customers": sorted(self.customers),
            "products": dict(sorted(self.products.items())),
            "orders": {
                oid: (o.customer_id, o.status,
                      {ln: (i.product_id, i.quantity, i.unit_price, i.discount)
                       for ln, i in sorted(o.items.items())})
                for oid, o in sorted(self.orders.items())
            },
        }


def load_state(cur: PgCursor) -> ShopState:
    """Read the current keys (ordered, so the model is the same for the same rows)."""
    state = ShopState()
    cur.execute("SELECT c.customer_id, coalesce(octet_length(c.notes), 0) > 8192, "
                "(SELECT count(*) FROM orders o WHERE o.customer_id = c.customer_id) "
                "FROM customers c ORDER BY c.customer_id")
    for cid, big, n_orders in cur.fetchall():
        state.add_customer(int(cid), big=bool(big), n_orders=int(n_orders))
    cur.execute("SELECT product_id, price, coalesce(octet_length(description), 0) > 8192 FROM products ORDER BY product_id")
    for pid, price, big in cur.fetchall():
        state.add_product(int(pid), Decimal(price), big=bool(big))
    cur.execute("SELECT order_id, customer_id, status FROM orders ORDER BY order_id")
    orders = {int(oid): Order(int(cid), str(status)) for oid, cid, status in cur.fetchall()}
    cur.execute("SELECT order_id, line_no, product_id, quantity, unit_price, discount FROM order_items "
                "ORDER BY order_id, line_no")
    for oid, line_no, pid, qty, price, discount in cur.fetchall():
        orders[int(oid)].items[int(line_no)] = Item(int(pid), int(qty), Decimal(price),
                                                    None if discount is None else Decimal(discount))
    for oid, order in orders.items():
        state.orders[oid] = order
        state.order_pool.add(oid)
        state.next_order_id = max(state.next_order_id, oid + 1)
    cur.execute(r"SELECT coalesce(max(substring(email FROM '^lg(\d+)@')::bigint), 0) FROM customers")
    row = cur.fetchone()
    cur.execute(r"SELECT coalesce(max(substring(sku FROM '^LG-(\d+)$')::bigint), 0) FROM products")
    row2 = cur.fetchone()
    state.serial = max(int(row[0]) if row else 0, int(row2[0]) if row2 else 0)
    return state


# --------------------------------------------------------------------------- the planner


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


def _money(value: Decimal) -> Decimal:
    return value.quantize(CENT, rounding=ROUND_HALF_EVEN)


def order_total(items: dict[int, Item]) -> Decimal:
    """``sum(quantity * unit_price * (1 - discount))`` rounded to cents, exactly."""
    total = Decimal(0)
    for it in items.values():
        line = it.unit_price * it.quantity
        if it.discount is not None:
            line = line * (1 - it.discount)
        total += _money(line)
    return _money(total)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


Apply = Callable[[], None]


class Planner:
    """Turns ``(rng, state)`` into the next :class:`Op`; pure apart from advancing ``state``.

    ``next_op`` advances ``state`` for ops that commit, so a planner can run
    ahead of (or entirely without) a database.
    """

    def __init__(self, state: ShopState, seed: int, weights: dict[str, int] | None = None, *,
                 prelude: bool = True) -> None:
        self.state = state
        self.rng = random.Random(seed)  # noqa: S311 - a reproducible workload, not a secret
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
    def _serial(self) -> int:
        self.state.serial += 1
        return self.state.serial

    def _text(self, n: int) -> str:
        return "".join(self.rng.choices(TEXT_ALPHABET, k=n))

    def _big_text(self) -> str:
        return self._text(BIG_TEXT_CHARS + self.rng.randrange(4000))

    def _price(self) -> Decimal:
        return Decimal(self.rng.randrange(50, 50_000)).scaleb(-2)  # numeric(12,2): Decimal('90.30')

    def _discount(self) -> Decimal | None:
        return None if self.rng.random() < 0.6 else Decimal(self.rng.choice((500, 1000, 1250, 3333))).scaleb(-4)

    def _profile(self) -> str | None:
        rng = self.rng
        if rng.random() < 0.2:
            return None
        return _json({"newsletter": rng.random() < 0.5, "langs": rng.sample(["de", "en", "es", "ja", "fr"], rng.randint(0, 3)),
                      "city": rng.choice(CITIES), "score": rng.randrange(1000) / 10})

    def _items(self, n: int) -> dict[int, Item]:
        items: dict[int, Item] = {}
        for line_no in range(1, n + 1):
            pid = self.state.product_pool.choice(self.rng)
            items[line_no] = Item(pid, self.rng.randint(1, 5), self.state.products[pid], self._discount())
        return items

    def _insert_items_stmt(self, oid: int, items: dict[int, Item]) -> Stmt:
        values = ", ".join(["(%s, %s, %s, %s, %s, %s)"] * len(items))
        params: list[Any] = []
        for line_no, it in items.items():
            params += [oid, line_no, it.product_id, it.quantity, it.unit_price, it.discount]
        return Stmt("insert", "order_items",
                    "INSERT INTO order_items (order_id, line_no, product_id, quantity, unit_price, discount) VALUES " + values,
                    tuple(params), rows=len(items))

    @staticmethod
    def _total_stmt(oid: int, total: Decimal) -> Stmt:
        return Stmt("update", "orders", "UPDATE orders SET total = %s, updated_at = %s WHERE order_id = %s",
                    (total, Now(), oid), rows=1)

    def _customer_insert_stmt(self, cid: int, big: bool) -> Stmt:
        rng = self.rng
        notes = self._big_text() if big else (None if rng.random() < 0.5 else self._text(rng.randrange(5, 200)))
        return Stmt(
            "insert", "customers",
            "INSERT INTO customers (customer_id, email, full_name, country, loyalty_tier, profile, notes, "
            "created_at, updated_at) VALUES (%s, %s, %s, %s, %s, %s::jsonb, %s, %s, %s)",
            (cid, f"lg{self._serial()}@shop.example", rng.choice(NAMES),
             None if rng.random() < 0.2 else rng.choice(COUNTRIES), None if rng.random() < 0.4 else rng.choice(TIERS),
             self._profile(), notes, Now(), Now()),
            rows=1)

    def _order_insert_stmts(self, oid: int, cid: int, n_items: int) -> tuple[list[Stmt], Order]:
        rng = self.rng
        items = self._items(n_items)
        shipping = None if rng.random() < 0.3 else _json({"city": rng.choice(CITIES), "express": rng.random() < 0.3})
        stmts = [
            Stmt("insert", "orders",
                 "INSERT INTO orders (order_id, customer_id, status, currency, total, shipping, note, placed_at, updated_at) "
                 "VALUES (%s, %s, 'pending', %s, 0, %s::jsonb, %s, %s, %s)",
                 (oid, cid, rng.choice(CURRENCIES), shipping, None if rng.random() < 0.7 else rng.choice(NAMES),
                  Now(-rng.randrange(1, 10**6)), Now()),
                 rows=1),
            self._insert_items_stmt(oid, items),
            self._total_stmt(oid, order_total(items)),
        ]
        return stmts, Order(cid, "pending", items)

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
        stmt = self._customer_insert_stmt(cid, big)
        return Op("insert_customer", (stmt,), writes=_rows("customers", cid)), lambda: st.add_customer(cid, big=big)

    def _plan_insert_product(self) -> tuple[Op, Apply]:
        st, rng = self.state, self.rng
        pid = st.next_product_id
        st.next_product_id += 1
        big = rng.random() < 0.2
        price = self._price()
        desc = self._big_text() if big else (None if rng.random() < 0.3 else self._text(rng.randrange(10, 300)))
        attrs = None if rng.random() < 0.3 else _json({"origin": rng.choice(CITIES), "weight_g": rng.randrange(10, 5000)})
        stmt = Stmt("insert", "products",
                    "INSERT INTO products (product_id, sku, name, description, price, attributes, active, updated_at) "
                    "VALUES (%s, %s, %s, %s, %s, %s::jsonb, %s, %s)",
                    (pid, f"LG-{self._serial()}", rng.choice(PRODUCT_NAMES), desc, price, attrs, rng.random() < 0.9, Now()),
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
            stmts.append(self._customer_insert_stmt(cid, False))
        else:
            cid = st.customers.choice(rng)
        order_stmts, order = self._order_insert_stmts(oid, cid, rng.randint(1, 4))
        stmts += order_stmts

        def apply() -> None:
            if new_customer:
                st.add_customer(cid)
            st.add_order(oid, order)

        customer = _rows("customers", cid)
        return Op("insert_order", tuple(stmts), writes=_rows("orders", oid) | (customer if new_customer else frozenset()),
                  reads=_item_refs(order.items) | (frozenset() if new_customer else customer)), apply

    # -- orders
    def _status_stmt(self, oid: int, status: str) -> Stmt:
        return Stmt("update", "orders", "UPDATE orders SET status = %s, updated_at = %s WHERE order_id = %s",
                    (status, Now(), oid), rows=1)

    def _plan_order_status(self) -> tuple[Op, Apply] | None:
        oid = self._pick_order(movable=True)
        if oid is None:
            return None
        order = self.state.orders[oid]
        new = self.rng.choice(ORDER_TRANSITIONS[order.status])

        def apply() -> None:
            order.status = new

        return Op("order_status", (self._status_stmt(oid, new),), writes=_rows("orders", oid)), apply

    def _plan_order_twice(self) -> tuple[Op, Apply] | None:
        """The same order updated twice (or three times) in one transaction."""
        rng = self.rng
        oid = self._pick_order(movable=True)
        if oid is None:
            return None
        order = self.state.orders[oid]
        first = rng.choice(ORDER_TRANSITIONS[order.status])
        stmts = [self._status_stmt(oid, first)]
        final = first
        if ORDER_TRANSITIONS[first]:
            final = rng.choice(ORDER_TRANSITIONS[first])
            stmts.append(self._status_stmt(oid, final))
        note = None if rng.random() < 0.3 else rng.choice(NAMES)
        shipping = None if rng.random() < 0.3 else _json({"city": rng.choice(CITIES), "tracking": f"TR{rng.randrange(10**9)}"})
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
        new_item = self._items(1)[1]
        items = {**order.items, line_no: new_item}
        stmts = (self._insert_items_stmt(oid, {line_no: new_item}), self._total_stmt(oid, order_total(items)))

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
                   self._discount() if rng.random() < 0.5 else old.discount)
        items = {**order.items, line_no: new}
        stmts = (
            Stmt("update", "order_items",
                 "UPDATE order_items SET quantity = %s, discount = %s WHERE order_id = %s AND line_no = %s",
                 (new.quantity, new.discount, oid, line_no), rows=1),
            self._total_stmt(oid, order_total(items)),
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
            self._total_stmt(oid, order_total(items)),
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
        stmts, order = self._order_insert_stmts(oid, cid, rng.randint(1, 3))
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
        item = self._items(1)[1]
        items = {**order.items, line_no: item}
        stmts = (self._insert_items_stmt(oid, {line_no: item}), self._total_stmt(oid, order_total(items)))

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
                        (self._profile(), Now(), cid), rows=1)
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
        notes = None if to_null else self._big_text()
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
        stmt = self._customer_insert_stmt(cid, big)
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
        price = self._price()
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
        attrs = None if rng.random() < 0.3 else _json({"origin": rng.choice(CITIES), "tags": rng.sample(NAMES, 2)})
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
                    (self._big_text(), Now(), pid), rows=1)
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
        price = self._price()
        order_a = st.orders[oid_a]
        status = rng.choice(ORDER_TRANSITIONS[order_a.status])
        a_stmts = (
            Stmt("update", "products", "UPDATE products SET price = %s, updated_at = %s WHERE product_id = %s",
                 (price, Now(), pid), rows=1),
            self._status_stmt(oid_a, status),
        )
        oid_b = st.next_order_id
        st.next_order_id += 1
        b_stmts, order_b = self._order_insert_stmts(oid_b, st.customers.choice(rng), rng.randint(1, 3))

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
            self._customer_insert_stmt(ghost, False),
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


# --------------------------------------------------------------------------- pacing


class TokenBucket:
    """Token bucket in changes: ``rate`` per second, at most ``burst`` saved up.

    ``take(n)`` may go into debt (a transaction bigger than the bucket still
    runs) and returns how long to sleep so the long-run rate stays at ``rate``.
    """

    def __init__(self, rate: float, burst: float, now: float) -> None:
        if rate <= 0:
            raise ValueError(f"rate must be > 0 changes/s, got {rate}")
        self.rate = rate
        self.burst = max(burst, 1.0)
        self.tokens = self.burst
        self.last = now

    def take(self, n: float, now: float) -> float:
        """Spend ``n`` tokens at time ``now``; return the seconds to wait before proceeding."""
        self.tokens = min(self.burst, self.tokens + (now - self.last) * self.rate)
        self.last = now
        self.tokens -= n
        return 0.0 if self.tokens >= 0 else -self.tokens / self.rate


# --------------------------------------------------------------------------- execution


def _empty_counts() -> dict[str, dict[str, int]]:
    return {t: {"insert": 0, "update": 0, "delete": 0} for t in TABLES}


@dataclass
class LoadReport:
    """What one run did. ``changes`` are committed row changes per table and kind;
    ``rolled_back_changes`` were executed then rolled back (whole transaction or
    to a savepoint) and must leave no trace in CDC."""

    seed: int
    target_rate: float
    changes: dict[str, dict[str, int]] = field(default_factory=_empty_counts)
    rolled_back_changes: dict[str, dict[str, int]] = field(default_factory=_empty_counts)
    ops: Counter[str] = field(default_factory=Counter)
    transactions: int = 0  # committed transactions (an interleaved op commits two)
    rollbacks: int = 0  # whole transactions rolled back
    savepoint_rollbacks: int = 0
    elapsed_s: float = 0.0
    digest: str = ""  # plan_digest of the ops executed
    stopped_by: str = ""  # "duration" or "max-changes"

    @property
    def total_changes(self) -> int:
        return sum(sum(k.values()) for k in self.changes.values())

    @property
    def total_rolled_back(self) -> int:
        return sum(sum(k.values()) for k in self.rolled_back_changes.values())

    @property
    def actual_rate(self) -> float:
        return self.total_changes / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def summary(self) -> str:
        lines = [f"loadgen cdc: seed={self.seed} target={self.target_rate:g}/s stopped by {self.stopped_by} "
                 f"after {self.elapsed_s:.1f}s",
                 f"  committed changes: {self.total_changes} ({self.actual_rate:.0f}/s) in {self.transactions} transactions; "
                 f"rolled back: {self.rollbacks} transactions + {self.savepoint_rollbacks} savepoints "
                 f"({self.total_rolled_back} row changes)",
                 f"  {'table':<12} {'insert':>8} {'update':>8} {'delete':>8}   rolled back (i/u/d)"]
        for t in TABLES:
            c, r = self.changes[t], self.rolled_back_changes[t]
            lines.append(f"  {t:<12} {c['insert']:>8} {c['update']:>8} {c['delete']:>8}   "
                         f"{r['insert']}/{r['update']}/{r['delete']}")
        lines.append("  operations: " + ", ".join(f"{k}={v}" for k, v in sorted(self.ops.items())))
        lines.append(f"  plan digest: {self.digest}")
        return "\n".join(lines)


def _resolve(params: tuple[Any, ...], tx_time: datetime) -> tuple[Any, ...]:
    return tuple(tx_time + timedelta(microseconds=p.offset_us) if isinstance(p, Now) else p for p in params)


def _execute(cur: PgCursor, stmts: Sequence[Stmt], tx_time: datetime, op: Op) -> None:
    import psycopg2

    for s in stmts:
        try:
            cur.execute(s.sql, _resolve(s.params, tx_time))
        except psycopg2.Error as exc:
            raise LoadgenError(f"op {op.name!r} failed on {s.sql[:80]!r} with {s.params[:3]!r}...: "
                               f"{str(exc).strip()}; the shop rows no longer match what the loadgen read at start "
                               "(another writer?)") from exc
        if s.kind in ("insert", "update", "delete") and cur.rowcount != s.rows:
            raise LoadgenError(f"op {op.name!r}: {s.sql[:80]!r} with {s.params[:3]!r}... changed {cur.rowcount} rows, "
                               f"expected {s.rows}; the shop rows changed under the loadgen (another writer?)")


def connect(settings: Settings) -> PgConnection:
    """Open a connection to the shop database, or say how to start it."""
    import psycopg2

    try:
        return psycopg2.connect(settings.pg_app_dsn(), connect_timeout=5,
                                application_name="lake-loadgen-cdc")
    except psycopg2.OperationalError as exc:
        raise LoadgenError(
            f"cannot connect to PostgreSQL at {settings.pg_host}:{settings.pg_port} "
            f"(database {settings.pg_shop_db!r}): {str(exc).strip()}; start it with `lake stack up`") from exc


class Executor:
    """Runs planned ops on one session (plus a second one for the interleaved op's other transaction)."""

    def __init__(self, settings: Settings, *, synchronous_commit: bool = True) -> None:
        self.conn = connect(settings)
        self.conn2 = connect(settings)
        if not synchronous_commit:
            # Commits stop waiting for the WAL flush (the walwriter flushes within
            # wal_writer_delay); order and content of what is committed are unchanged.
            for conn in (self.conn, self.conn2):
                with conn.cursor() as cur:
                    cur.execute("SET synchronous_commit = off")
                conn.commit()

    def close(self) -> None:
        self.conn.close()
        self.conn2.close()

    def run(self, op: Op) -> None:
        tx_time = datetime.now(UTC)
        try:
            with self.conn.cursor() as cur:
                if op.interleave:
                    _execute(cur, op.statements[:op.interleave_at], tx_time, op)
                    with self.conn2.cursor() as cur2:
                        _execute(cur2, op.interleave, datetime.now(UTC), op)
                    self.conn2.commit()
                    _execute(cur, op.statements[op.interleave_at:], tx_time, op)
                else:
                    _execute(cur, op.statements, tx_time, op)
        except LoadgenError:
            self.conn.rollback()
            self.conn2.rollback()
            raise
        if op.rollback:
            self.conn.rollback()
        else:
            self.conn.commit()


def account(report: LoadReport, op: Op) -> None:
    """Count what ``op`` did once it has run (committed or rolled back)."""
    if op.rollback:
        report.rollbacks += 1
    else:
        report.transactions += 2 if op.interleave else 1
    report.savepoint_rollbacks += sum(1 for s in (*op.statements, *op.interleave) if s.kind == "rollback_to_savepoint")
    for table, kind, n, survives in iter_changes(op):
        target = report.changes if survives and not op.rollback else report.rolled_back_changes
        target[table][kind] += n
    report.ops[op.name + (" (rolled back)" if op.rollback else "")] += 1


class Scheduler:
    """Orders ops that touch the same rows; ops on disjoint rows may run concurrently.

    Ops are submitted in plan order. An op waits for the last earlier op that
    wrote any row it reads or writes, and, if it writes a row, for every earlier
    op that read that row since. Two ops that may run at once therefore change
    disjoint rows and only share foreign-key parents that neither changes
    (PostgreSQL's KEY SHARE locks on those parents do not conflict), so any
    order of them leaves the same rows as the plan order, and every statement
    finds the rows the planner expected. ``serial=True`` makes every op wait for
    the one before it (one session: the commit order is the plan order).
    """

    def __init__(self, *, serial: bool = False) -> None:
        self.serial = serial
        self._last_write: dict[Key, int] = {}
        self._reads: dict[Key, list[int]] = {}
        self._waiting_on: dict[int, set[int]] = {}
        self._dependents: dict[int, list[int]] = {}
        self._done: set[int] = set()
        self._next = 0

    def submit(self, op: Op) -> tuple[int, bool]:
        """Register the next op in plan order; return its number and whether it may run now."""
        seq = self._next
        self._next += 1
        deps: set[int] = {seq - 1} if self.serial and seq > 0 else set()
        for key in op.reads:
            if key in self._last_write:
                deps.add(self._last_write[key])
            self._reads.setdefault(key, []).append(seq)
        for key in op.writes:
            if key in self._last_write:
                deps.add(self._last_write[key])
            deps.update(self._reads.pop(key, ()))
            self._last_write[key] = seq
        deps.discard(seq)
        deps -= self._done
        if deps:
            self._waiting_on[seq] = deps
            for d in deps:
                self._dependents.setdefault(d, []).append(seq)
        return seq, not deps

    def done(self, seq: int) -> list[int]:
        """Mark ``seq`` finished; return the ops that may run now (in plan order)."""
        self._done.add(seq)
        ready = []
        for dep in self._dependents.pop(seq, ()):
            waiting = self._waiting_on[dep]
            waiting.discard(seq)
            if not waiting:
                del self._waiting_on[dep]
                ready.append(dep)
        return sorted(ready)


class _Workers:
    """``n`` threads, each with its own :class:`Executor`, running ops the scheduler released."""

    def __init__(self, settings: Settings, n: int, *, synchronous_commit: bool) -> None:
        import queue
        import threading

        self.todo: queue.Queue[tuple[int, Op] | None] = queue.Queue()
        self.finished: queue.Queue[tuple[int, Op, Exception | None]] = queue.Queue()
        self.executors: list[Executor] = []
        try:
            for _ in range(n):
                self.executors.append(Executor(settings, synchronous_commit=synchronous_commit))
        except BaseException:
            self.close()
            raise
        self.threads = [threading.Thread(target=self._work, args=(ex,), name=f"loadgen-cdc-{i}", daemon=True)
                        for i, ex in enumerate(self.executors)]
        for t in self.threads:
            t.start()

    def _work(self, executor: Executor) -> None:
        while (item := self.todo.get()) is not None:
            seq, op = item
            try:
                executor.run(op)
            except Exception as exc:  # noqa: BLE001 - handed to the planning thread, which raises it
                self.finished.put((seq, op, exc))
            else:
                self.finished.put((seq, op, None))

    def close(self) -> None:
        for _ in getattr(self, "threads", ()):
            self.todo.put(None)
        for t in getattr(self, "threads", ()):
            t.join()
        for ex in self.executors:
            ex.close()


def run(settings: Settings, rate: float, duration: float, seed: int, max_changes: int | None = None,
        *, progress: Callable[[str], None] | None = None, progress_every: float = 5.0,
        synchronous_commit: bool = True, connections: int = DEFAULT_CONNECTIONS) -> LoadReport:
    """Run the workload at ``rate`` committed changes/s until ``duration`` seconds or ``max_changes``.

    One thread plans the seeded ops in order and paces them; ``connections``
    sessions run them, concurrently where :class:`Scheduler` allows (ops on the
    same rows keep their plan order), so the rows left behind are the plan's
    whatever the interleaving. With ``connections=1`` the commit order is the plan order.
    Never commits more than ``max_changes`` (stops before an op that would exceed it).
    ``synchronous_commit=False`` sets it off for the loadgen's sessions: roughly
    doubles the reachable rate when WAL fsync is the bottleneck, at the price of
    up to ``wal_writer_delay`` (200 ms) before a commit is visible to CDC.
    """
    import queue

    if duration <= 0:
        raise ValueError(f"duration must be > 0 seconds, got {duration}")
    if max_changes is not None and max_changes < 1:
        raise ValueError(f"max_changes must be >= 1, got {max_changes}")
    if connections < 1:
        raise ValueError(f"connections must be >= 1, got {connections}")
    report = LoadReport(seed=seed, target_rate=rate)
    conn = connect(settings)
    try:
        with conn.cursor() as cur:
            state = load_state(cur)
        conn.rollback()
    finally:
        conn.close()
    planner = Planner(state, seed)
    scheduler = Scheduler(serial=connections == 1)
    workers = _Workers(settings, connections, synchronous_commit=synchronous_commit)
    digest = hashlib.sha256()
    in_flight: dict[int, Op] = {}  # submitted, not finished
    running: set[int] = set()  # handed to the sessions (queued or executing)
    max_in_flight = 4 * connections  # how far planning may run ahead of the sessions
    planned_changes = 0
    failure: tuple[Op, Exception] | None = None

    def dispatch(seq: int) -> None:
        running.add(seq)
        workers.todo.put((seq, in_flight[seq]))

    def finish(block_until: float | None) -> None:
        """Take finished ops off the queue (waiting until ``block_until`` for the first); release dependents."""
        nonlocal failure
        while True:
            try:
                if block_until is None:
                    seq, op, exc = workers.finished.get_nowait()
                else:
                    seq, op, exc = workers.finished.get(timeout=max(0.0, block_until - time.monotonic()))
            except queue.Empty:
                return
            block_until = None
            del in_flight[seq]
            running.discard(seq)
            if exc is not None:
                failure = failure or (op, exc)
                continue
            account(report, op)
            if failure is None:
                for ready in scheduler.done(seq):
                    dispatch(ready)

    try:
        start = time.monotonic()
        bucket = TokenBucket(rate, burst=max(10.0, rate * 0.05), now=start)
        next_progress = start + progress_every
        report.stopped_by = "duration"
        while failure is None:
            now = time.monotonic()
            if now - start >= duration:
                break
            if now >= next_progress and progress is not None:
                report.elapsed_s = now - start
                progress(f"  {report.elapsed_s:5.0f}s  {report.total_changes} changes ({report.actual_rate:.0f}/s), "
                         f"{report.transactions} commits, {report.rollbacks} rollbacks, {len(in_flight)} in flight")
                next_progress += progress_every
            op = planner.next_op()
            n = op.committed_changes()
            if max_changes is not None and planned_changes + n > max_changes:
                report.stopped_by = "max-changes"
                break
            wait = bucket.take(n, now)
            if wait > 0:
                if now + wait - start >= duration:
                    break
                until = now + wait
                while time.monotonic() < until and failure is None:
                    finish(until)
            while len(in_flight) >= max_in_flight and failure is None:
                finish(time.monotonic() + 1.0)
            if failure is not None:
                break
            finish(None)
            seq, ready = scheduler.submit(op)
            in_flight[seq] = op
            planned_changes += n
            digest.update(op.signature().encode("utf-8"))
            digest.update(b"\x00")
            if ready:
                dispatch(seq)
            if max_changes is not None and planned_changes == max_changes:
                report.stopped_by = "max-changes"
                break
        # Let what was handed out finish; it releases the rest, unless an op failed (then nothing more starts).
        while running:
            finish(time.monotonic() + 1.0)
        report.elapsed_s = time.monotonic() - start
    finally:
        workers.close()
    if failure is not None:
        op, exc = failure
        if isinstance(exc, LoadgenError):
            raise exc
        raise LoadgenError(f"op {op.name!r} failed: {exc}") from exc
    report.digest = digest.hexdigest()
    return report


def _build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="lake loadgen cdc", description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--rate", type=float, required=True, help="target committed row changes per second")
    p.add_argument("--duration", type=float, required=True, help="seconds to run")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--max-changes", type=int, default=None, help="stop before committing more than this many changes")
    p.add_argument("--async-commit", action="store_true",
                   help="SET synchronous_commit = off in the loadgen's sessions (faster; CDC sees commits up to ~200 ms later)")
    p.add_argument("--connections", type=int, default=DEFAULT_CONNECTIONS,
                   help=f"sessions running transactions at once (default {DEFAULT_CONNECTIONS}); transactions on the "
                        "same rows keep their planned order, so the rows left behind do not depend on this; "
                        "1 commits in plan order")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _build_parser().parse_args(argv)
    from spark_jobs.settings import SettingsError, load_settings

    try:
        settings = load_settings()
        print(f"loadgen cdc: {args.rate:g} changes/s for {args.duration:g}s, seed {args.seed}, "
              f"{args.connections} connection(s) against {settings.pg_host}:{settings.pg_port}/{settings.pg_shop_db}", flush=True)
        report = run(settings, args.rate, args.duration, args.seed, args.max_changes,
                     progress=lambda line: print(line, flush=True), synchronous_commit=not args.async_commit,
                     connections=args.connections)
    except (LoadgenError, SettingsError, ValueError) as exc:
        print(f"lake loadgen cdc: {exc}", file=sys.stderr)
        return 2
    print(report.summary(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
