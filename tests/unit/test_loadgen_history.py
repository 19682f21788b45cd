"""The history load generator's plan and writer (no services: the writer runs on fake clients)."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, date, datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal
from itertools import pairwise
from typing import Any

import pytest

from spark_jobs import cli
from spark_jobs.contracts.clickstream import check_record, parse_event_time
from spark_jobs.loadgen import history
from spark_jobs.loadgen.history_plan import (
    ID_SPAN,
    HistoryPlan,
    PlanError,
    id_range,
    line_amount,
    plan_history,
)
from spark_jobs.loadgen.producer import EventProducer, serialize

END = date(2026, 3, 10)
TRACKED = {"country", "loyalty_tier"}
TRANSITIONS = {"pending": {"paid", "cancelled"}, "paid": {"shipped", "refunded"}, "shipped": {"refunded"}}


@pytest.fixture(scope="module")
def plan() -> HistoryPlan:
    return plan_history(7, 3, END, orders_per_day=60, events_per_day=700)


@pytest.fixture(scope="module")
def events(plan: HistoryPlan) -> list[list[dict[str, Any]]]:
    return plan.events


def replay(plan: HistoryPlan) -> dict[str, Any]:
    """Apply the plan to an in-memory shop, failing on anything PostgreSQL would refuse; return the model."""
    rows: dict[str, dict[tuple[int, ...], dict[str, Any]]] = {t: {} for t in history.TABLES}
    alive: dict[int, list[list[datetime | None]]] = {}  # customer -> [[from, to or None], ...]
    prices: dict[int, list[tuple[datetime, Decimal]]] = {}
    statuses: dict[int, list[tuple[str, datetime]]] = {}
    for tx in plan.txs:
        for ch in tx.changes:
            key = tuple(ch.key.values())
            table = rows[ch.table]
            if ch.kind == "insert":
                assert key not in table, f"{tx.label}: duplicate key {ch.table} {key}"
                table[key] = dict(ch.values)
                if ch.table == "customers":
                    alive.setdefault(key[0], []).append([tx.at, None])
                if ch.table == "products":
                    prices[key[0]] = [(tx.at, ch.values["price"])]
                if ch.table == "orders":
                    assert (ch.values["customer_id"],) in rows["customers"], f"order {key}: customer missing"
                    statuses[key[0]] = [("pending", tx.at)]
                if ch.table == "order_items":
                    assert (ch.values["order_id"],) in rows["orders"], f"item {key}: order missing"
                    assert (ch.values["product_id"],) in rows["products"], f"item {key}: product missing"
            elif ch.kind == "update":
                assert key in table, f"{tx.label}: update of missing {ch.table} {key}"
                table[key].update(ch.values)
                if ch.table == "products" and "price" in ch.values:
                    prices[key[0]].append((tx.at, ch.values["price"]))
                if ch.table == "orders":
                    statuses[key[0]].append((ch.values["status"], tx.at))
            else:
                assert key in table, f"{tx.label}: delete of missing {ch.table} {key}"
                assert ch.table == "customers"
                assert not any(o["customer_id"] == key[0] for o in rows["orders"].values()), "FK: customer has orders"
                del table[key]
                alive[key[0]][-1][1] = tx.at
    return {"rows": rows, "alive": alive, "prices": prices, "statuses": statuses}


def price_at(history_: list[tuple[datetime, Decimal]], at: datetime) -> Decimal:
    return [p for t, p in history_ if t <= at][-1]


# --------------------------------------------------------------------------- determinism


def test_same_seed_same_plan_and_events(plan: HistoryPlan, events: list[list[dict[str, Any]]]) -> None:
    again = plan_history(7, 3, END, orders_per_day=60, events_per_day=700)
    assert again.txs == plan.txs
    assert again.events == events
    assert again.digest() == plan.digest()


def test_other_seed_other_plan(plan: HistoryPlan) -> None:
    other = plan_history(8, 3, END, orders_per_day=60, events_per_day=700)
    assert other.digest() != plan.digest()
    assert other.id_low == plan.id_high  # seeds own adjacent, disjoint ranges


def test_end_date_anchors_the_window_not_the_content(plan: HistoryPlan) -> None:
    assert plan.start == datetime(2026, 3, 7, tzinfo=UTC) and plan.end == datetime(2026, 3, 10, tzinfo=UTC)
    shifted = plan_history(7, 3, END + timedelta(days=1), orders_per_day=60, events_per_day=700)
    assert [tx.at - plan.start for tx in plan.txs] == [tx.at - shifted.start for tx in shifted.txs]


# --------------------------------------------------------------------------- time and ids


def test_transactions_are_in_time_order_inside_the_window(plan: HistoryPlan) -> None:
    keys = [(tx.at, tx.seq) for tx in plan.txs]
    assert keys == sorted(keys)
    assert all(plan.start <= tx.at < plan.end for tx in plan.txs)


def test_every_timestamp_is_the_simulated_time_of_its_transaction(plan: HistoryPlan) -> None:
    for tx in plan.txs:
        for ch in tx.changes:
            for col in ("created_at", "updated_at", "placed_at"):
                if col in ch.values:
                    assert ch.values[col] == tx.at, (tx.label, col)
            if ch.kind == "update":
                assert ch.values["updated_at"] == tx.at, tx.label
            if ch.kind == "insert" and ch.table != "order_items":
                assert "updated_at" in ch.values, f"{ch.table} insert leaves updated_at to now()"


def test_ids_stay_in_the_seeds_range(plan: HistoryPlan) -> None:
    low, high = id_range(7)
    assert (low, high) == (8 * ID_SPAN, 9 * ID_SPAN) == (plan.id_low, plan.id_high)
    for tx in plan.txs:
        for ch in tx.changes:
            for col in ("customer_id", "product_id", "order_id"):
                if col in ch.values or col in ch.key:
                    assert low < {**ch.values, **ch.key}[col] < high


def test_the_plan_replays_without_breaking_a_key_or_foreign_key(plan: HistoryPlan) -> None:
    model = replay(plan)
    assert {t: len(r) for t, r in model["rows"].items()} == {t: c["insert"] - c["delete"] for t, c in plan.counts().items()}


# --------------------------------------------------------------------------- orders


def test_order_totals_follow_the_half_even_rule_per_line(plan: HistoryPlan) -> None:
    model = replay(plan)
    items: dict[int, list[dict[str, Any]]] = {}
    for item in model["rows"]["order_items"].values():
        items.setdefault(item["order_id"], []).append(item)
    for oid, order in model["rows"]["orders"].items():
        expected = sum((Decimal(i["quantity"]) * i["unit_price"] * (1 - (i["discount"] or Decimal(0))))
                       .quantize(Decimal("0.01"), rounding=ROUND_HALF_EVEN) for i in items[oid[0]])
        assert order["total"] == expected and order["total"].as_tuple().exponent == -2
        assert all(i["quantity"] > 0 and i["discount"] in (None, Decimal("0.05"), Decimal("0.10"))
                   for i in items[oid[0]])
    assert {o["currency"] for o in model["rows"]["orders"].values()} == {"EUR", "USD"}


def test_line_amount_rounds_half_to_even() -> None:
    assert line_amount(1, Decimal("0.50"), Decimal("0.05")) == Decimal("0.48")  # 0.475 -> 0.48 (8 even)
    assert line_amount(1, Decimal("0.70"), Decimal("0.05")) == Decimal("0.66")  # 0.665 -> 0.66 (6 even)
    assert line_amount(3, Decimal("18.90"), None) == Decimal("56.70")


def test_unit_price_is_the_products_price_when_ordered(plan: HistoryPlan) -> None:
    model = replay(plan)
    placed = {k[0]: o["placed_at"] for k, o in model["rows"]["orders"].items()}
    for item in model["rows"]["order_items"].values():
        assert item["unit_price"] == price_at(model["prices"][item["product_id"]], placed[item["order_id"]])
    changed = [pid for pid, h in model["prices"].items() if len(h) > 1]
    assert changed, "some product must change price"
    assert len({h[1][0].date() for pid, h in model["prices"].items() if len(h) > 1}) >= 2, "on several days"


def test_status_transitions_are_legal_and_later_than_placement(plan: HistoryPlan) -> None:
    statuses = replay(plan)["statuses"]
    seen: Counter[str] = Counter()
    next_day = 0
    for steps in statuses.values():
        for (prev, t_prev), (status, t) in pairwise(steps):
            assert status in TRANSITIONS[prev] and t > t_prev
            seen[status] += 1
        next_day += any(t.date() > steps[0][1].date() for _, t in steps[1:])
    assert all(seen[s] for s in ("paid", "shipped", "cancelled", "refunded")), seen
    assert next_day > 0, "some transition must land on a later day"


# --------------------------------------------------------------------------- customers (SCD2 edge cases)


def test_delete_moves_updated_at_first_and_the_id_comes_back(plan: HistoryPlan) -> None:
    deletes = [tx for tx in plan.txs if tx.label == "customer_delete"]
    assert deletes
    for tx in deletes:
        update, delete = tx.changes
        assert (update.kind, delete.kind) == ("update", "delete") and update.key == delete.key
        assert update.values == {"updated_at": tx.at}
        later = [t for t in plan.txs if t.label == "customer_recreate" and t.changes[0].key == delete.key]
        assert len(later) == 1 and later[0].at > tx.at
        assert later[0].changes[0].values["created_at"] == later[0].at


def test_two_tracked_changes_in_one_transaction(plan: HistoryPlan) -> None:
    two = [tx for tx in plan.txs if tx.label == "customer_two_statements"]
    assert len(two) == 1
    (first, second), = (two[0].changes,)
    assert first.key == second.key and set(first.values) - {"updated_at"} == {"country"}
    assert set(second.values) - {"updated_at"} == {"loyalty_tier"}
    both = [tx for tx in plan.txs if tx.label == "customer_both"]
    assert len(both) == 1 and set(both[0].changes[0].values) == TRACKED | {"updated_at"}


def test_a_change_of_untracked_columns_only(plan: HistoryPlan) -> None:
    untracked = [tx for tx in plan.txs if tx.label == "customer_untracked"]
    assert untracked
    for tx in untracked:
        assert not TRACKED & set(tx.changes[0].values)


def test_tracked_changes_really_change_the_value(plan: HistoryPlan) -> None:
    current: dict[int, dict[str, Any]] = {}
    for tx in plan.txs:
        for ch in tx.changes:
            if ch.table != "customers":
                continue
            cid = ch.key["customer_id"]
            if ch.kind == "insert":
                current[cid] = dict(ch.values)
            elif ch.kind == "update":
                for col in TRACKED & set(ch.values):
                    assert ch.values[col] != current[cid][col], (tx.label, col)
                current[cid].update(ch.values)


# --------------------------------------------------------------------------- events


def test_events_follow_the_contract(events: list[list[dict[str, Any]]]) -> None:
    now = datetime.now(UTC)
    for day in events:
        for e in day:
            assert check_record(serialize(e), now) is None, e


def test_events_per_day_are_exact_sorted_and_inside_their_day(plan: HistoryPlan,
                                                              events: list[list[dict[str, Any]]]) -> None:
    assert [len(day) for day in events] == [700] * plan.days
    for d, day in enumerate(events):
        times = [parse_event_time(e["event_time"]) for e in day]
        assert times == sorted(times)  # type: ignore[type-var]
        assert all(plan.start + timedelta(days=d) <= t < plan.start + timedelta(days=d + 1) for t in times if t)
    assert len({e["event_id"] for day in events for e in day}) == 700 * plan.days


def test_users_exist_when_they_act(plan: HistoryPlan, events: list[list[dict[str, Any]]]) -> None:
    alive = replay(plan)["alive"]
    for day in events:
        for e in day:
            t = parse_event_time(e["event_time"])
            spans = alive[e["user_id"]]
            assert t and any(a <= t and (b is None or t < b) for a, b in spans), e


def test_purchases_are_the_planned_orders(plan: HistoryPlan, events: list[list[dict[str, Any]]]) -> None:
    orders = replay(plan)["rows"]["orders"]
    purchases = [e for day in events for e in day if e["event_type"] == "purchase"]
    assert purchases
    for e in purchases:
        order = orders[(int(e["properties"]["order_id"]),)]
        assert e["user_id"] == order["customer_id"]
        assert parse_event_time(e["event_time"]) == order["placed_at"]
        assert Decimal(e["properties"]["revenue"]) == order["total"]
        assert e["properties"]["currency"] == order["currency"]
    assert len({e["properties"]["order_id"] for e in purchases}) == len(purchases)


def test_every_order_gets_its_purchase_when_the_budget_allows() -> None:
    p = plan_history(1, 1, END, orders_per_day=10, events_per_day=500)
    assert Counter(e["event_type"] for e in p.events[0])["purchase"] == 10


# --------------------------------------------------------------------------- arguments


@pytest.mark.parametrize("kwargs, message", [
    ({"days": 0}, "--days"),
    ({"days": 4000}, "--days"),
    ({"seed": -1}, "--seed"),
    ({"seed": 10**6}, "--seed"),
    ({"orders_per_day": -1}, "--orders-per-day"),
    ({"days": 10, "orders_per_day": 100_000}, "--orders-per-day"),
    ({"events_per_day": -5}, "--events-per-day"),
])
def test_bad_arguments_name_the_option(kwargs: dict[str, int], message: str) -> None:
    args = {"seed": 1, "days": 2, "orders_per_day": 5, "events_per_day": 5, **kwargs}
    with pytest.raises(PlanError, match=message):
        plan_history(args["seed"], args["days"], END, orders_per_day=args["orders_per_day"],
                     events_per_day=args["events_per_day"])


def test_cli_rejects_a_future_end_date_and_bad_days(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["loadgen", "history", "--end-date", "2999-01-01"]) == 2
    assert "future" in capsys.readouterr().err
    assert cli.main(["loadgen", "history", "--days", "0"]) == 2
    assert "--days must be between 1" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["loadgen", "history", "--end-date", "10.3.2026"])


def test_cli_dry_run_prints_counts_without_services(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["loadgen", "history", "--days", "2", "--seed", "5", "--orders-per-day", "10",
                     "--events-per-day", "50", "--end-date", "2026-03-10", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "seed 5, 2 day(s) 2026-03-08 .. 2026-03-09" in out and "[6,000,000, 7,000,000)" in out
    assert "orders" in out and "100 sent" in out


# --------------------------------------------------------------------------- writer (fake clients)


class FakeCursor:
    def __init__(self, conn: FakeConn) -> None:
        self.conn, self.rowcount = conn, 0
        self._one: tuple[int, ...] = (0,)

    def __enter__(self) -> FakeCursor:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def execute(self, sql: str, params: Any = None) -> None:
        self.conn.log.append((sql, params))
        self.rowcount = 1
        self._one = (self.conn.taken, 0) if "count(*)" in sql else (0,)

    def fetchone(self) -> tuple[int, ...]:
        return self._one


class FakeConn:
    def __init__(self, taken: int = 0) -> None:
        self.taken = taken
        self.log: list[tuple[str, Any]] = []

    def cursor(self) -> FakeCursor:
        return FakeCursor(self)

    def commit(self) -> None:
        self.log.append(("COMMIT", None))

    def rollback(self) -> None:
        self.log.append(("ROLLBACK", None))


class FakeKafka:
    def __init__(self) -> None:
        self.values: list[bytes] = []
        self._pending: list[Any] = []

    def produce(self, topic: str, value: bytes, key: bytes, on_delivery: Any) -> None:
        self.values.append(value)
        self._pending.append(on_delivery)

    def poll(self, timeout: float) -> int:
        class Msg:
            def partition(self) -> int:
                return 0

            def offset(self) -> int:
                return 0

        served, self._pending = self._pending, []
        for cb in served:
            cb(None, Msg())
        return len(served)

    def flush(self, timeout: float) -> int:
        self.poll(0)
        return 0

    def __len__(self) -> int:
        return len(self._pending)


def _settings() -> Any:
    from spark_jobs.settings import load_settings

    return load_settings({"LAKE_STATE_DIR": "/nonexistent-lake-state", "LAKE_PG_PORT": "25432"})


def test_writer_runs_the_plan_in_order_and_sends_every_event() -> None:
    plan = plan_history(3, 2, END, orders_per_day=20, events_per_day=100)
    conn, kafka = FakeConn(), FakeKafka()
    producer = EventProducer("fake:9092", producer=kafka)
    result = history.write_history(plan, _settings(), conn=conn, producer=producer,  # type: ignore[arg-type]
                                   commit_every=50)
    statements = [(sql, params) for sql, params in conn.log if sql != "COMMIT" and "count(*)" not in sql]
    expected = [history.statement(ch) for tx in plan.txs for ch in tx.changes]
    assert statements == expected
    assert len(kafka.values) == 200 and result["events"]["delivered"] == 200
    assert result["tables"]["orders"]["rows"] == 40 and result["tables"] == {
        t: {**c, "rows": c["insert"] - c["delete"]} for t, c in plan.counts().items()}
    # commits fall between planned transactions, never inside one, and a commit never holds two planned
    # transactions on the same row (gold SCD2 makes one version per commit)
    bounds, pos = {0}, 0
    for tx in plan.txs:
        pos += len(tx.changes)
        bounds.add(pos)
    done, commits = 0, 0
    for sql, _ in conn.log:
        if sql == "COMMIT":
            assert done in bounds
            commits += 1
        elif "count(*)" not in sql:
            done += 1
    assert commits > plan.days
    done, batch_rows = 0, set[tuple[Any, ...]]()
    ends = {b: tx for b, tx in zip(sorted(bounds)[1:], plan.txs, strict=True)}
    tx_rows: set[tuple[Any, ...]] = set()
    for sql, _ in conn.log:
        if sql == "COMMIT":
            batch_rows = set[tuple[Any, ...]]()
        elif "count(*)" not in sql:
            done += 1
            if done in ends:
                tx_rows = {(c.table, *c.key.values()) for c in ends[done].changes}
                assert not tx_rows & batch_rows, ends[done].label
                batch_rows |= tx_rows


def test_writer_refuses_a_used_id_range() -> None:
    plan = plan_history(3, 1, END, orders_per_day=2, events_per_day=2)
    with pytest.raises(history.HistoryError, match=r"seed 3's id range \[4,000,000, 5,000,000\).*another --seed.*make clean"):
        history.write_history(plan, _settings(), conn=FakeConn(taken=5),  # type: ignore[arg-type]
                              producer=EventProducer("fake:9092", producer=FakeKafka()))


def test_update_statement_binds_values_then_key() -> None:
    plan = plan_history(3, 1, END, orders_per_day=5, events_per_day=0)
    paid = next(tx for tx in plan.txs if tx.label == "order_paid").changes[0]
    sql, params = history.statement(paid)
    assert sql == "UPDATE orders SET status = %s, updated_at = %s WHERE order_id = %s"
    assert params == ("paid", paid.values["updated_at"], paid.key["order_id"])
