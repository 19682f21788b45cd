"""Seeded clickstream load to ``events.clickstream`` (``lake loadgen events``), with late, duplicate and bad records.

Users (``shop.customers`` ids, or ``--users N`` for ids 1..N) walk sessions
page_view -> add_to_cart -> checkout -> purchase with drop-off at every step;
purchase revenue is the exact sum of the cart (integer cents, sent as a decimal
string). Besides on-time events (``event_time`` = now, UTC, ms precision) each
record is, with the given probabilities:

* ``--late F``: a valid event whose ``event_time`` is 60-1799 s (uniform, whole
  seconds) in the past;
* ``--dup F``: a re-send of one of the last 10,000 valid records (same bytes,
  key and ``event_id``);
* ``--bad F``: a malformed record, split evenly across ``not_json``,
  ``wrong_type``, ``missing_field`` and ``oversized``; each is built so the
  contract gives it exactly that reason code.

Determinism: three independent random streams derived from the seed drive the
categories, the event ids and the sessions, so the same seed and record count
give the same category sequence and the same event ids whatever the user list
(``event_ids_sha256`` is comparable across runs); with the same users the
events are the same too (only ``event_time`` follows the clock). The run sends
exactly ``round(rate * duration)`` records, paced evenly (a due-count loop with
~1 ms steps, no bursts); when the machine cannot keep up it takes longer and says so.

The manifest (JSON, also summarised on stdout) has the exact counts, the offset
range per partition from the delivery reports and the hash of the sorted
unique event ids; ``lake reconcile events --manifest`` checks the lake against it.
Exit status: 0 when every record was delivered, 1 when some were not, 2 when the
run could not start.
"""

from __future__ import annotations

import hashlib
import json
import random
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from spark_jobs.contracts.clickstream import (
    EVENT_TYPES,
    MAX_EVENT_BYTES,
    MISSING_FIELD,
    NOT_JSON,
    OVERSIZED,
    SCHEMA_VERSION,
    WRONG_TYPE,
)

if TYPE_CHECKING:
    from spark_jobs.loadgen.producer import EventProducer
    from spark_jobs.settings import Settings

BAD_KINDS = (NOT_JSON, WRONG_TYPE, MISSING_FIELD, OVERSIZED)
VALID, LATE, DUPLICATE = "valid", "late", "duplicate"
LATE_MIN_S, LATE_MAX_S = 60, 1799  # 1 to 30 minutes, whole seconds
LATE_SPLIT_S = 600  # the manifest splits late events at 10 minutes
DUP_WINDOW = 10_000  # re-sends pick one of the last this-many valid records
ACTIVE_SESSIONS = 256
N_PRODUCTS = 500
CURRENCY = "EUR"
PAGES = ("/", "/search?q=coffee", "/search?q=tea", "/category/kitchen", "/category/gifts", "/deals", "/cart",
         "/account", "/help/shipping", "/blog/brewing-guide")
# Session walk: from browsing, P(page_view), P(add_to_cart), P(checkout if the cart is not empty); else leave.
P_VIEW, P_CART, P_CHECKOUT = 0.55, 0.25, 0.10
P_PURCHASE = 0.70  # after checkout; otherwise the checkout is abandoned
PROGRESS_EVERY_S = 5.0
POLL_EVERY = 256  # serve delivery reports every this-many records


class LoadgenError(RuntimeError):
    """The run could not start; the message says what to do."""


@dataclass(frozen=True, slots=True)
class Record:
    """One record to produce and what it is (for the manifest and the tests)."""

    kind: str  # VALID, LATE, DUPLICATE or one of BAD_KINDS
    key: bytes
    value: bytes
    event_id: str
    event_type: str
    revenue_cents: int = 0  # valid purchases only
    late_s: int = 0  # late events only
    id_bytes: bytes = b""  # the event id as 16 bytes (valid and late events)


@dataclass(slots=True)
class _Session:
    user_id: int
    session_id: str
    checkout: bool = False
    cart_cents: int = 0


def _money(cents: int) -> str:
    return f"{cents // 100}.{cents % 100:02d}"


class ClickstreamGenerator:
    """Turns ``(seed, users, fractions)`` into records; the clock only sets ``event_time``.

    ``clock`` returns epoch seconds (``time.time`` by default; tests pass a constant).
    """

    def __init__(self, seed: int, users: Sequence[int], *, late: float = 0.0, dup: float = 0.0,
                 bad: float = 0.0, clock: Callable[[], float] = time.time) -> None:
        for name, frac in (("late", late), ("dup", dup), ("bad", bad)):
            if not 0.0 <= frac <= 1.0:
                raise ValueError(f"--{name} must be a fraction between 0 and 1, got {frac}")
        if late + dup + bad > 1.0:
            raise ValueError(f"--late + --dup + --bad must be at most 1, got {late + dup + bad:g}")
        if not users:
            raise ValueError("no users to generate events for (pass --users N or load customers into shop)")
        self.seed = seed
        self.users = list(users)
        self._bad, self._dup, self._late = bad, bad + dup, bad + dup + late
        self._clock = clock
        # Three streams so ids and categories do not depend on the users or the session walk.
        # A reproducible workload, not secrets: hence random.Random (S311).
        self._cat = random.Random(f"{seed}:category")  # noqa: S311
        self._ids = random.Random(f"{seed}:event-id")  # noqa: S311
        self._sim = random.Random(f"{seed}:sessions")  # noqa: S311
        self._prices = [self._sim.randint(199, 24_999) for _ in range(N_PRODUCTS)]
        self._sessions = [self._new_session() for _ in range(ACTIVE_SESSIONS)]
        self._recent: list[Record] = []
        self._recent_pos = 0
        self._encode = json.JSONEncoder(separators=(",", ":")).encode
        self._sec = -1
        self._sec_text = ""

    # -- sessions -------------------------------------------------------------------------

    def _new_session(self) -> _Session:
        sim = self._sim
        return _Session(self.users[sim.randrange(len(self.users))], f"s-{sim.getrandbits(64):016x}")

    def _step(self) -> tuple[str, _Session, dict[str, Any], int]:
        """Advance a random active session: ``(event_type, session, properties, revenue_cents)``."""
        sim = self._sim
        i = sim.randrange(ACTIVE_SESSIONS)
        s = self._sessions[i]
        r = sim.random()
        if s.checkout:
            self._sessions[i] = self._new_session()
            if r < P_PURCHASE:
                props = {"order_id": f"o-{sim.getrandbits(64):016x}", "revenue": _money(s.cart_cents),
                         "currency": CURRENCY}
                return "purchase", s, props, s.cart_cents
            s = self._sessions[i]  # abandoned checkout; a new visitor lands
            return "page_view", s, {"page": "/"}, 0
        if r < P_VIEW:
            k = sim.randrange(len(PAGES) + 20)
            page = PAGES[k] if k < len(PAGES) else f"/p/{sim.randrange(N_PRODUCTS) + 1}"
            return "page_view", s, {"page": page}, 0
        if r < P_VIEW + P_CART:
            pid = sim.randrange(N_PRODUCTS)
            qty = 1 if sim.random() < 0.7 else sim.randint(2, 5)
            price = self._prices[pid]
            s.cart_cents += qty * price
            return "add_to_cart", s, {"product_id": pid + 1, "quantity": qty, "price": _money(price)}, 0
        if r < P_VIEW + P_CART + P_CHECKOUT and s.cart_cents > 0:
            s.checkout = True
            return "checkout", s, {"cart_value": _money(s.cart_cents)}, 0
        self._sessions[i] = s = self._new_session()  # left; a new visitor lands
        return "page_view", s, {"page": "/"}, 0

    # -- records --------------------------------------------------------------------------

    def _time_text(self, ms: int) -> str:
        sec, milli = divmod(ms, 1000)
        if sec != self._sec:
            self._sec = sec
            self._sec_text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(sec))
        return f"{self._sec_text}.{milli:03d}Z"

    def _event(self, late_s: int = 0) -> tuple[dict[str, Any], str, int, bytes]:
        event_type, s, props, revenue = self._step()
        event_uuid = uuid.UUID(int=self._ids.getrandbits(128), version=4)
        ms = int(self._clock() * 1000) - late_s * 1000
        doc = {"event_id": str(event_uuid), "event_type": event_type, "user_id": s.user_id,
               "session_id": s.session_id, "event_time": self._time_text(ms), "properties": props,
               "schema_version": SCHEMA_VERSION}
        return doc, event_type, revenue, event_uuid.bytes

    def next_record(self) -> Record:
        r = self._cat.random()
        if r < self._bad:
            return self._bad_record(BAD_KINDS[int(self._cat.random() * len(BAD_KINDS))])
        late_s = 0
        if r < self._dup:
            if self._recent:  # (the very first records cannot be re-sends: they go out on time instead)
                original = self._recent[int(self._cat.random() * len(self._recent))]
                return Record(DUPLICATE, original.key, original.value, original.event_id, original.event_type)
        elif r < self._late:
            late_s = self._cat.randint(LATE_MIN_S, LATE_MAX_S)
        doc, event_type, revenue, id_bytes = self._event(late_s)
        rec = Record(LATE if late_s else VALID, str(doc["user_id"]).encode(), self._encode(doc).encode(),
                     doc["event_id"], event_type, revenue, late_s, id_bytes)
        if len(self._recent) < DUP_WINDOW:
            self._recent.append(rec)
        else:
            self._recent[self._recent_pos] = rec
            self._recent_pos = (self._recent_pos + 1) % DUP_WINDOW
        return rec

    def _bad_record(self, kind: str) -> Record:
        cat = self._cat
        doc, event_type, _, _ = self._event()
        key = str(doc["user_id"]).encode()
        if kind == NOT_JSON:
            text = self._encode(doc).encode()
            variant = int(cat.random() * 5)
            if variant == 0:  # truncated: any proper prefix of an object is not JSON
                value = text[: 1 + int(cat.random() * (len(text) - 1))]
            elif variant == 1:
                value = b"GET /favicon.ico HTTP/1.1"
            elif variant == 2:  # JSON, but an array
                value = b"[" + text + b"]"
            elif variant == 3:  # trailing content after the object
                value = text + b" trailing"
            else:  # not UTF-8
                value = b"\xff\xfe" + text
        elif kind == WRONG_TYPE:
            name, wrong = _WRONG_TYPES[int(cat.random() * len(_WRONG_TYPES))]
            doc[name] = wrong(doc)
            value = self._encode(doc).encode()
        elif kind == MISSING_FIELD:
            del doc[_REQUIRED[int(cat.random() * len(_REQUIRED))]]
            value = self._encode(doc).encode()
        elif kind == OVERSIZED:
            doc["properties"]["blob"] = "x" * (MAX_EVENT_BYTES + 1 + int(cat.random() * 4096))
            value = self._encode(doc).encode()
        else:
            raise ValueError(f"unknown bad kind {kind!r}; expected one of {BAD_KINDS}")
        event_id = doc.get("event_id")
        return Record(kind, key, value, event_id if isinstance(event_id, str) else "", event_type)


_REQUIRED = ("event_id", "event_type", "user_id", "session_id", "event_time", "properties", "schema_version")
_WRONG_TYPES: tuple[tuple[str, Callable[[dict[str, Any]], Any]], ...] = (
    ("user_id", lambda d: "abc"),
    ("user_id", lambda d: str(d["user_id"])),
    ("event_time", lambda d: 1_700_000_000_123),
    ("session_id", lambda d: 12345),
    ("event_id", lambda d: None),
    ("schema_version", lambda d: "1"),
    ("properties", lambda d: "page=/"),
    ("event_type", lambda d: 3),
    ("user_id", lambda d: float(d["user_id"]) + 0.5),
)


# --------------------------------------------------------------------------- counting


@dataclass
class Tally:
    """Exact counts of what was produced, by category."""

    total: int = 0
    kinds: Counter[str] = field(default_factory=Counter)
    by_event_type: Counter[str] = field(default_factory=Counter)
    revenue_cents: int = 0
    late_lt_10m: int = 0
    late_ge_10m: int = 0
    _ids: bytearray = field(default_factory=bytearray)

    def add(self, rec: Record) -> None:
        self.total += 1
        kind = rec.kind
        self.kinds[kind] += 1
        if kind == VALID or kind == LATE:
            self.by_event_type[rec.event_type] += 1
            self.revenue_cents += rec.revenue_cents
            self._ids += rec.id_bytes
            if rec.late_s:
                if rec.late_s < LATE_SPLIT_S:
                    self.late_lt_10m += 1
                else:
                    self.late_ge_10m += 1

    @property
    def valid_unique(self) -> int:
        return self.kinds[VALID] + self.kinds[LATE]

    def event_ids_sha256(self) -> str:
        return event_ids_digest_bytes(bytes(self._ids))


def event_ids_digest(event_ids: Sequence[str]) -> str:
    """SHA-256 over the sorted event ids as 16-byte big-endian UUIDs (sorting the text gives the same order)."""
    return event_ids_digest_bytes(b"".join(uuid.UUID(e).bytes for e in event_ids))


def event_ids_digest_bytes(packed: bytes) -> str:
    import numpy as np

    ids = np.frombuffer(packed, dtype=">u8").reshape(-1, 2)
    order = np.lexsort((ids[:, 1], ids[:, 0]))
    return hashlib.sha256(np.ascontiguousarray(ids[order]).astype(">u8").tobytes()).hexdigest()


# --------------------------------------------------------------------------- the run


def load_users(settings: Settings) -> list[int]:
    """Customer ids of the shop database, ordered."""
    import psycopg2

    try:
        conn = psycopg2.connect(settings.pg_app_dsn(), connect_timeout=5,
                                application_name="lake-loadgen-events")
    except psycopg2.OperationalError as exc:
        raise LoadgenError(f"cannot read users from PostgreSQL at {settings.pg_host}:{settings.pg_port} "
                           f"(database {settings.pg_shop_db!r}): {str(exc).strip()}; start it with `lake stack up` "
                           "or pass --users N for user ids 1..N") from exc
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT customer_id FROM customers ORDER BY customer_id")
            users = [int(r[0]) for r in cur.fetchall()]
    finally:
        conn.close()
    if not users:
        raise LoadgenError(f"shop.customers at {settings.pg_host}:{settings.pg_port} is empty; "
                           "seed it (`lake stack up`) or pass --users N")
    return users


@dataclass
class RunResult:
    manifest: dict[str, Any]
    delivered_all: bool


def _iso(epoch: float | None) -> str | None:
    return None if epoch is None else datetime.fromtimestamp(epoch, UTC).isoformat(timespec="milliseconds")


def run(producer: EventProducer, generator: ClickstreamGenerator, *, rate: float, duration: float,
        progress: Callable[[str], None] | None = None, flush_timeout: float | None = None) -> RunResult:
    """Produce ``round(rate * duration)`` records evenly paced at ``rate``/s; return the manifest.

    ``flush_timeout`` None: the final flush waits as the producer's own default (its delivery timeout plus
    :data:`~spark_jobs.loadgen.producer.FLUSH_MARGIN_S`)."""
    if rate <= 0 or duration <= 0:
        raise ValueError(f"--rate and --duration must be > 0, got {rate:g} and {duration:g}")
    total = max(1, round(rate * duration))
    tally = Tally()
    send, poll = producer.send_raw, producer.poll
    start = time.monotonic()
    next_progress = start + PROGRESS_EVERY_S
    sent = 0
    first_produce = time.time()
    while sent < total:
        now = time.monotonic()
        due = min(total, int((now - start) * rate) + 1, sent + 2000)
        if sent >= due:
            time.sleep(min(0.001, max(0.0, (sent - (now - start) * rate) / rate)))
            continue
        while sent < due:
            rec = generator.next_record()
            send(rec.key, rec.value)
            tally.add(rec)
            sent += 1
            if sent % POLL_EVERY == 0:
                poll(0)
        if progress is not None and now >= next_progress:
            elapsed = now - start
            progress(f"  {elapsed:5.0f}s  {sent} sent ({sent / elapsed:.0f}/s), {producer.stats.delivered} delivered, "
                     f"{producer.stats.failed} failed")
            next_progress += PROGRESS_EVERY_S
    last_produce = time.time()
    produce_s = time.monotonic() - start
    flush_error = None
    try:
        producer.flush(flush_timeout)
    except RuntimeError as exc:  # ProducerError
        flush_error = str(exc)
    elapsed = time.monotonic() - start
    stats = producer.stats
    manifest: dict[str, Any] = {
        "topic": producer.topic,
        "bootstrap": producer.bootstrap,
        "seed": generator.seed,
        "rate_target": rate,
        "duration_target_s": duration,
        "produce_seconds": round(produce_s, 3),
        "rate_achieved": round(sent / produce_s, 1) if produce_s > 0 else None,
        "elapsed_with_flush_s": round(elapsed, 3),
        "users": len(generator.users),
        "total_sent": tally.total,
        "valid_unique": tally.valid_unique,
        "on_time": tally.kinds[VALID],
        "late": tally.kinds[LATE],
        "late_lt_10m": tally.late_lt_10m,
        "late_ge_10m": tally.late_ge_10m,
        "duplicates": tally.kinds[DUPLICATE],
        "bad": {k: tally.kinds[k] for k in BAD_KINDS},
        "bad_total": sum(tally.kinds[k] for k in BAD_KINDS),
        "by_event_type": {t: tally.by_event_type[t] for t in EVENT_TYPES},
        "purchase_revenue": _money(tally.revenue_cents),
        "currency": CURRENCY,
        "offsets": stats.offset_ranges(),
        "delivered": stats.delivered,
        "delivery_failed": stats.failed + (producer.pending() if flush_error else 0),
        "delivery_errors": stats.errors + ([flush_error] if flush_error else []),
        "first_produce_time": _iso(first_produce),
        "last_produce_time": _iso(last_produce),
        "event_ids_sha256": tally.event_ids_sha256(),
        "event_ids_sha256_of": "sorted unique valid event ids (on-time + late) as 16-byte big-endian UUIDs",
    }
    return RunResult(manifest, manifest["delivery_failed"] == 0 and stats.delivered == tally.total)


def summary(m: dict[str, Any]) -> str:
    bad = ", ".join(f"{k}={v}" for k, v in m["bad"].items())
    types = ", ".join(f"{k}={v}" for k, v in m["by_event_type"].items())
    lines = [
        f"loadgen events: seed={m['seed']} topic={m['topic']} target {m['rate_target']:g}/s for "
        f"{m['duration_target_s']:g}s -> {m['total_sent']} records in {m['produce_seconds']:.1f}s "
        f"({m['rate_achieved']:.0f}/s)",
        f"  valid unique {m['valid_unique']} (late {m['late']}: <10m {m['late_lt_10m']}, >=10m {m['late_ge_10m']}), "
        f"duplicates {m['duplicates']}, bad {m['bad_total']} ({bad})",
        f"  by event type: {types}; purchase revenue {m['purchase_revenue']} {m['currency']}",
        f"  delivered {m['delivered']}, failed {m['delivery_failed']}; offsets {m['offsets']}",
        f"  event ids sha256 {m['event_ids_sha256']}",
    ]
    if m["rate_achieved"] is not None and m["rate_achieved"] < 0.95 * m["rate_target"]:
        lines.append(f"  note: reached {m['rate_achieved']:.0f}/s, below the {m['rate_target']:g}/s asked for")
    lines.extend(f"  delivery error: {e}" for e in m["delivery_errors"])
    return "\n".join(lines)
