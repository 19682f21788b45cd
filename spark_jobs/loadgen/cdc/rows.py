"""Random row values for the shop tables and the SQL statements that write one row.

The planner decides which rows an op touches; :class:`RowMaker` draws their
values from the planner's seeded ``random.Random`` (so the same seed gives the
same values) and builds the statements.
"""

from __future__ import annotations

import json
import random
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any

from spark_jobs.loadgen.cdc.model import Item, Order, ShopState
from spark_jobs.loadgen.cdc.plan import Now, Stmt

BIG_TEXT_CHARS = 12_000  # > 8 KB even in ASCII, and too random for pglz: stored out of line
CENT = Decimal("0.01")
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


def to_json(value: Any) -> str:
    """``value`` as JSON text with sorted keys (stable across runs), non-ASCII kept as is."""
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


class RowMaker:
    """Draws row values from ``rng`` and builds the statements that write them; reads ``state`` for
    product prices and advances its ``serial`` (unique e-mails and SKUs)."""

    def __init__(self, rng: random.Random, state: ShopState) -> None:
        self.rng = rng
        self.state = state

    def serial(self) -> int:
        self.state.serial += 1
        return self.state.serial

    def text(self, n: int) -> str:
        return "".join(self.rng.choices(TEXT_ALPHABET, k=n))

    def big_text(self) -> str:
        return self.text(BIG_TEXT_CHARS + self.rng.randrange(4000))

    def price(self) -> Decimal:
        return Decimal(self.rng.randrange(50, 50_000)).scaleb(-2)  # numeric(12,2): Decimal('90.30')

    def discount(self) -> Decimal | None:
        return None if self.rng.random() < 0.6 else Decimal(self.rng.choice((500, 1000, 1250, 3333))).scaleb(-4)

    def profile(self) -> str | None:
        rng = self.rng
        if rng.random() < 0.2:
            return None
        return to_json({"newsletter": rng.random() < 0.5, "langs": rng.sample(["de", "en", "es", "ja", "fr"], rng.randint(0, 3)),
                        "city": rng.choice(CITIES), "score": rng.randrange(1000) / 10})

    def items(self, n: int) -> dict[int, Item]:
        items: dict[int, Item] = {}
        for line_no in range(1, n + 1):
            pid = self.state.product_pool.choice(self.rng)
            items[line_no] = Item(pid, self.rng.randint(1, 5), self.state.products[pid], self.discount())
        return items

    def insert_items_stmt(self, oid: int, items: dict[int, Item]) -> Stmt:
        values = ", ".join(["(%s, %s, %s, %s, %s, %s)"] * len(items))
        params: list[Any] = []
        for line_no, it in items.items():
            params += [oid, line_no, it.product_id, it.quantity, it.unit_price, it.discount]
        return Stmt("insert", "order_items",
                    "INSERT INTO order_items (order_id, line_no, product_id, quantity, unit_price, discount) VALUES " + values,
                    tuple(params), rows=len(items))

    @staticmethod
    def total_stmt(oid: int, total: Decimal) -> Stmt:
        return Stmt("update", "orders", "UPDATE orders SET total = %s, updated_at = %s WHERE order_id = %s",
                    (total, Now(), oid), rows=1)

    def customer_insert_stmt(self, cid: int, big: bool) -> Stmt:
        rng = self.rng
        notes = self.big_text() if big else (None if rng.random() < 0.5 else self.text(rng.randrange(5, 200)))
        return Stmt(
            "insert", "customers",
            "INSERT INTO customers (customer_id, email, full_name, country, loyalty_tier, profile, notes, "
            "created_at, updated_at) VALUES (%s, %s, %s, %s, %s, %s::jsonb, %s, %s, %s)",
            (cid, f"lg{self.serial()}@shop.example", rng.choice(NAMES),
             None if rng.random() < 0.2 else rng.choice(COUNTRIES), None if rng.random() < 0.4 else rng.choice(TIERS),
             self.profile(), notes, Now(), Now()),
            rows=1)

    def order_insert_stmts(self, oid: int, cid: int, n_items: int) -> tuple[list[Stmt], Order]:
        rng = self.rng
        items = self.items(n_items)
        shipping = None if rng.random() < 0.3 else to_json({"city": rng.choice(CITIES), "express": rng.random() < 0.3})
        stmts = [
            Stmt("insert", "orders",
                 "INSERT INTO orders (order_id, customer_id, status, currency, total, shipping, note, placed_at, updated_at) "
                 "VALUES (%s, %s, 'pending', %s, 0, %s::jsonb, %s, %s, %s)",
                 (oid, cid, rng.choice(CURRENCIES), shipping, None if rng.random() < 0.7 else rng.choice(NAMES),
                  Now(-rng.randrange(1, 10**6)), Now()),
                 rows=1),
            self.insert_items_stmt(oid, items),
            self.total_stmt(oid, order_total(items)),
        ]
        return stmts, Order(cid, "pending", items)

    def status_stmt(self, oid: int, status: str) -> Stmt:
        return Stmt("update", "orders", "UPDATE orders SET status = %s, updated_at = %s WHERE order_id = %s",
                    (status, Now(), oid), rows=1)
