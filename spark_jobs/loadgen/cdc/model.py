"""What the planner knows about the shop rows: keys, references, prices, statuses."""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from psycopg2.extensions import cursor as PgCursor

NEW_ID_FLOOR = 1000  # new rows get ids above this; the seeded snapshot rows stay recognisable


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
