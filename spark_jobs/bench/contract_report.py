"""``lake bench contract``'s table: what :func:`spark_jobs.bench.contract.bench` measured, for a
reader (the measuring is in :mod:`spark_jobs.bench.contract`)."""

from __future__ import annotations

from typing import Any


def _split_us(row: dict[str, Any], part: str) -> str:
    figure = (row.get("split") or {}).get(part)
    return "-" if figure is None else f"{figure['us_per_record']:.2f}"


def table(result: dict[str, Any]) -> str:
    """The figures as a plain table (the command's output without ``--json``)."""
    lines = [f"contract check of {result['events']:,} records (seed {result['seed']}, {result['repeat']} round(s), "
             f"interleaved; ours rejects {result['rejected_by_ours']:,}); load {result['loadavg_before']} -> "
             f"{result['loadavg_after']} on {result['cpus']} CPUs",
             f"{'validator':<20} {'version':<8} {'best/s':>10} {'median/s':>10} {'us/rec':>7} {'x ours':>7} "
             f"{'disagree':>8} {'codes diff':>10} {'us/accepted':>11} {'us/rejected':>11}"]
    for r in result["validators"]:
        agree = r.get("agreement")
        lines.append(f"{r['name']:<20} {r['version'] or '-':<8} {r['records_per_s_best']:>10,} "
                     f"{r['records_per_s_median']:>10,} {r['us_per_record_median']:>7.2f} {r['x_ours_median']:>7.2f} "
                     f"{'-' if agree is None else agree['disagreements']:>8} "
                     f"{'-' if agree is None else agree['reason_codes_differ']:>10} "
                     f"{_split_us(r, 'accepted'):>11} {_split_us(r, 'rejected'):>11}")
    if result["not_installed"]:
        lines.append(f"not installed (not measured): {', '.join(result['not_installed'])}")
    for r in result["validators"]:
        for ex in (r.get("agreement") or {}).get("examples", []):
            lines.append(f"  {r['name']} disagrees: ours {ex['ours']!r}, theirs {ex['theirs']!r}: {ex['value']}")
    for name, rows in result["edge_cases"].items():
        differ = [e for e in rows if not e["same_code"]]
        lines.append(f"edge cases, {name}: {sum(not e['same_valid'] for e in rows)} of {len(rows)} verdicts "
                     f"(valid/invalid) differ from ours, {len(differ)} reason codes")
        lines.extend(f"  {'VERDICT' if not e['same_valid'] else 'code'} {e['case']}: ours {e['ours']!r}, "
                     f"theirs {e['theirs']!r}" for e in differ)
    lines.append(f"verdict: {result['verdict']}")
    return "\n".join(lines)
