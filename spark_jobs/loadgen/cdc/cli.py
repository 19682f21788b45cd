"""Seeded random OLTP workload against the ``shop`` database (``lake loadgen cdc``).

The command line of :func:`~spark_jobs.loadgen.cdc.runner.run`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from spark_jobs.loadgen.cdc.execute import LoadgenError
from spark_jobs.loadgen.cdc.runner import DEFAULT_CONNECTIONS, run


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
