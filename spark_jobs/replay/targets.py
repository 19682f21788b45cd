"""Which live tables a replay can rebuild, what each is rebuilt from and where its shadow lives.

Pure metadata, no Spark: the table registry (:mod:`spark_jobs.contracts.tables`) and the CDC contracts say which
tables the streaming app writes; a replay rebuilds those that are a function of the bronze archive:

* ``silver.<t>`` of every CDC contract, from ``bronze.shop__public__<t>`` (with its delete markers
  ``silver.<t>__deleted``, rebuilt beside it and switched with it);
* ``silver.events``, from ``bronze.events__clickstream``;
* the hot tables (``hot.*``), from the same replayed events (``metrics(hot) = aggregate(silver.events WHERE NOT
  _late)``, :mod:`spark_jobs.hot.windows`).

A shadow is ``replay.<db>__<table>`` (``replay.silver__orders``): a Delta table in the ``replay`` database at the
canonical location of that name, so analysts can query it next to the live table before the switch.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from spark_jobs.contracts.clickstream import TOPIC as EVENTS_TOPIC
from spark_jobs.contracts.shop import CDC_TABLES
from spark_jobs.hot.windows import HOT_VIEWS

CDC, EVENTS, HOT = "cdc", "events", "hot"
REPLAY_DB = "replay"
EVENTS_BRONZE = "bronze.events__clickstream"
EVENTS_SILVER = "silver.events"
#: ops control table: one row per build, switch and rollback (see :mod:`spark_jobs.replay.history`).
REPLAYS = "ops.replays"


class ReplayTargetError(ValueError):
    """A table name a replay cannot rebuild; the message lists those it can."""


@dataclass(frozen=True)
class ReplayTarget:
    """One live table a replay rebuilds: ``kind`` (cdc | events | hot), its bronze source and its keys."""

    live: str
    kind: str
    bronze: str
    topic: str
    keys: tuple[str, ...]
    #: Columns the diff leaves out: bookkeeping the stream sets per micro-batch, which a replay cannot know.
    bookkeeping: tuple[str, ...] = ()
    #: CDC only: the delete markers table switched with ``live``.
    companion: str | None = None

    @property
    def shadow(self) -> str:
        return shadow_name(self.live)

    @property
    def companion_shadow(self) -> str | None:
        return shadow_name(self.companion) if self.companion else None


def shadow_name(live: str) -> str:
    """``silver.orders`` -> ``replay.silver__orders``."""
    db, sep, table = live.partition(".")
    if not sep:
        raise ReplayTargetError(f"{live!r} is not <database>.<table>")
    return f"{REPLAY_DB}.{db}__{table}"


def _all_targets() -> list[ReplayTarget]:
    out = [ReplayTarget(c.silver, CDC, c.bronze, c.topic, c.keys, companion=c.deleted) for c in CDC_TABLES.values()]
    out.append(ReplayTarget(EVENTS_SILVER, EVENTS, EVENTS_BRONZE, EVENTS_TOPIC, ("event_id",),
                            bookkeeping=("_batch_id",)))
    out += [ReplayTarget(v.table, HOT, EVENTS_BRONZE, EVENTS_TOPIC, ("window_start",),
                         bookkeeping=("updated_at", "_last_batch")) for v in HOT_VIEWS]
    return out


TARGETS: dict[str, ReplayTarget] = {t.live: t for t in _all_targets()}


def resolve(names: Sequence[str], everything: bool = False) -> list[ReplayTarget]:
    """The targets named (``silver.orders``, ``hot.*``, ``silver.*``), or every one with ``everything``; in registry
    order (CDC tables, silver.events, hot), each once. Unknown names are an error that lists the known ones."""
    if everything == bool(names):
        raise ReplayTargetError("name the tables to replay (e.g. silver.orders hot.*) or pass --all, not both")
    if everything:
        return list(TARGETS.values())
    wanted: set[str] = set()
    for name in names:
        if name.endswith(".*"):
            found = {t for t in TARGETS if t.startswith(name[:-1])}
        else:
            found = {name} if name in TARGETS else set()
        if not found:
            raise ReplayTargetError(f"{name} cannot be replayed: a replay rebuilds {', '.join(TARGETS)} "
                                    "(or a pattern like silver.* / hot.*)")
        wanted |= found
    return [t for t in TARGETS.values() if t.live in wanted]


def needs_events(targets: Iterable[ReplayTarget]) -> bool:
    """Whether the replayed events (shadow of ``silver.events``) are built: for it or for a hot table."""
    return any(t.kind in (EVENTS, HOT) for t in targets)
