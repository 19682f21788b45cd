"""The CDC loadgen's model of the shop migration's snapshot rows, shared by the loadgen planner and scheduler tests."""

from __future__ import annotations

from decimal import Decimal

from spark_jobs.loadgen.cdc.model import Item, ShopState


def seeded_state() -> ShopState:
    """The model of the migration's snapshot rows (V001__shop_schema.sql)."""
    from spark_jobs.loadgen.cdc.model import Order

    st = ShopState()
    st.add_customer(1, n_orders=1)
    st.add_customer(2, big=True)
    st.add_customer(3, n_orders=1)
    st.add_product(10, Decimal("18.90"), big=True)
    st.add_product(11, Decimal("24.00"))
    st.add_product(12, Decimal("50.00"))
    for oid, cid, status, item in ((100, 1, "paid", Item(10, 2, Decimal("18.90"), None)),
                                   (101, 3, "pending", Item(11, 1, Decimal("24.00"), Decimal("0.0500")))):
        st.orders[oid] = Order(cid, status, {1: item})
        st.order_pool.add(oid)
    st.next_order_id = 1001
    return st
