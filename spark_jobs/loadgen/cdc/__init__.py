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

Determinism: :func:`~.model.load_state` reads the keys that exist (ordered), then
:class:`~.planner.Planner` turns ``(random.Random(seed), model)`` into concrete
:class:`~.plan.Op` values (SQL and parameters) without touching the database;
the executor only runs them. The same seed on the same starting rows therefore
gives the same operation sequence, which :func:`~.plan.plan_digest` summarises.
Several sessions (``--connections``) run the ops concurrently: each op names
the rows it writes and the foreign-key parents it reads, and
:class:`~.schedule.Scheduler` keeps ops on the same rows in plan order, so the
rows left behind are the plan's whatever the interleaving (one session was the
loadgen's limit; figures in ``docs/benchmarks.md``).
Every run opens with a fixed prelude of edge-case ops (one op in three, see
``PRELUDE``) and rolls back its 5th op, so even a few hundred changes cover
every case; after that ops are drawn by ``OP_WEIGHTS``.
Only timestamps come from the wall clock (``Now`` placeholders in the plan).

A "change" is one row-level insert, update or delete, counting rows deleted by
``ON DELETE CASCADE``. Pacing and ``--max-changes`` count committed changes.

Modules, in the order a run uses them:

- ``plan``: the plan values (:class:`~.plan.Op`, :class:`~.plan.Stmt`, ``Now``) and their digest.
- ``model``: what the planner knows about the shop rows (:class:`~.model.ShopState`).
- ``rows``: random row values and the SQL statements that write one row.
- ``planner``: the seeded choice of the next op and its effect on the model.
- ``pacing``: the token bucket that holds the rate.
- ``execute``: running an op on PostgreSQL, and the run's report.
- ``schedule``: which ops may run at once, and the worker sessions.
- ``runner``: :func:`~.runner.run`, which ties them together; ``cli``: ``lake loadgen cdc``.
"""
