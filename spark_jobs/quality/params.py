"""Placeholder values a suite's SQL is filled with (data interval, now, SLOs), as session-time-zone-proof SQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from spark_jobs.contracts.tables import freshness_slos

if TYPE_CHECKING:
    from spark_jobs.settings import Settings

#: Default age a change must reach before a cross-table rule judges it (``{settle_seconds}``): the CDC topics
#: of two tables apply independently, so a fresh order may not have its items yet.
SETTLE_SECONDS = 600

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def utc_micros(when: datetime) -> int:
    if when.tzinfo is None or when.utcoffset() is None:
        raise ValueError(f"{when!r} has no time zone: pass aware datetimes (the data interval in UTC)")
    delta = when.astimezone(UTC) - _EPOCH
    return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds


def freshness_slo(table: str, settings: Settings) -> int:
    """``table``'s freshness SLO in seconds: its ``LAKE_DQ_FRESHNESS_TABLES`` entry, else the registry's (0: none).

    An entry for a table without a declared SLO is refused, naming the ones that have one (a typo would otherwise
    leave the SLO it meant to change in force).
    """
    from spark_jobs.settings import SettingsError

    declared = freshness_slos()
    overrides = settings.dq_freshness_overrides()
    unknown = sorted(set(overrides) - set(declared))
    if unknown:
        raise SettingsError(f"LAKE_DQ_FRESHNESS_TABLES names {', '.join(unknown)}, which declare no freshness SLO; "
                            f"the tables that do: {', '.join(declared)}")
    return overrides.get(table, declared.get(table, 0))


def query_params(table: str, interval: tuple[datetime, datetime] | None, now: datetime,
                 settings: Settings | None, settle_seconds: int = SETTLE_SECONDS) -> dict[str, str]:
    """Placeholder values for a suite's SQL: instants as ``timestamp_micros`` (session-time-zone proof)."""
    start, end = interval if interval else (now - timedelta(days=1), now)
    if interval and end <= start:
        raise ValueError(f"empty interval for {table}: start {start.isoformat()} is not before end {end.isoformat()}")
    if settle_seconds < 0:
        raise ValueError(f"settle_seconds={settle_seconds} must be >= 0")
    slo = "" if settings is None else str(freshness_slo(table, settings))
    return {
        "interval_start": f"timestamp_micros({utc_micros(start)})",
        "interval_end": f"timestamp_micros({utc_micros(end)})",
        "interval_start_date": f"DATE'{start.astimezone(UTC).date().isoformat()}'",
        "interval_end_date": f"DATE'{end.astimezone(UTC).date().isoformat()}'",
        "now": f"timestamp_micros({utc_micros(now)})",
        "freshness_slo_seconds": slo or "0",
        "settle_seconds": str(int(settle_seconds)),
    }
