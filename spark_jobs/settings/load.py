"""Build :class:`Settings` from the environment, then ``<state dir>/.env``, then the model's defaults."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from pydantic import ValidationError
from pydantic_settings import DotEnvSettingsSource, EnvSettingsSource

from spark_jobs.settings.model import Settings, defaults
from spark_jobs.settings.validation import SettingsError, env_name


class _Environ(EnvSettingsSource):
    """``LAKE_*`` variables of the process, or of the mapping a caller (a test) passes instead."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self._environ = environ
        super().__init__(Settings)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return {self._apply_case_sensitive(k): v for k, v in self._environ.items()}


#: Settings an older version read, and what replaces each (an old ``.env`` fails with the fix, not silently).
REMOVED = {
    name: ("each live table's freshness SLO is declared in the table registry (freshness_slo_seconds in "
           "spark_jobs/contracts/tables.py); set a different one per table with "
           "LAKE_DQ_FRESHNESS_TABLES=<db>.<table>=<seconds>,...")
    for name in ("LAKE_DQ_FRESHNESS_SILVER_SECONDS", "LAKE_DQ_FRESHNESS_HOT_SECONDS")
} | {"LAKE_EVENTS_ARCHIVE_TRIGGER_SECONDS": (
    "the hot tables and the archive are one events query (lake_events) since one read, check and de-duplication "
    "feeds both; its trigger is LAKE_EVENTS_TRIGGER_SECONDS")}


def _refuse_unknown(names: Iterable[str], file: Path | None = None) -> None:
    """A ``LAKE_`` name the model does not know, from the environment or ``file`` (``.env``), is an error: a
    removed setting names its replacement, any other the list of valid names."""
    names = {n for n in names if n.startswith("LAKE_")}
    for name in sorted(names & set(REMOVED)):
        raise SettingsError(f"{name} ({file or 'environment'}) is no longer a setting: {REMOVED[name]}")
    unknown = sorted(names - {env_name(name) for name in defaults()})
    if unknown:
        raise SettingsError(f"{f'{file}: ' if file else ''}unknown setting(s) {', '.join(unknown)}; the valid names "
                            "are listed in .env.example")


class _DotEnv(DotEnvSettingsSource):
    """``<state dir>/.env``: generated secrets and local overrides. A line that is not ``KEY=VALUE`` is an error."""

    def _read_env_file(self, file_path: Path) -> Mapping[str, str | None]:
        for lineno, raw in enumerate(file_path.read_text(encoding="utf-8").splitlines(), 1):
            line = raw.strip()
            if line and not line.startswith("#") and "=" not in line:
                raise SettingsError(f"{file_path}:{lineno}: expected KEY=VALUE, got {raw!r}")
        values = super()._read_env_file(file_path)
        _refuse_unknown((k.upper() for k in values), file_path)
        return values


def load_settings(environ: Mapping[str, str] | None = None, *, dotenv: bool = True) -> Settings:
    """Resolve settings from ``environ`` (default ``os.environ``) and the state dir's ``.env``.

    ``dotenv=False``: the environment and the defaults only. Root decides whom to run as and which binaries to
    trust with these (:mod:`spark_jobs.stack.service_user`); the ``.env`` is the service user's file.
    """
    env = {k: v for k, v in (os.environ if environ is None else environ).items() if k.startswith("LAKE_")}
    _refuse_unknown(env)
    # The state dir locates .env, so it comes from the environment alone.
    state_dir = Path(env.get("LAKE_STATE_DIR", defaults()["state_dir"])).expanduser().resolve()
    env["LAKE_STATE_DIR"] = str(state_dir)
    sources = (_Environ(env), _DotEnv(Settings, env_file=state_dir / ".env")) if dotenv else (_Environ(env),)
    try:
        # BaseSettings' own keyword: mypy sees only the fields in the constructor.
        return Settings(_build_sources=(sources, {}))  # type: ignore[call-arg]
    except ValidationError as exc:
        raise SettingsError("\n".join(_explain(err) for err in exc.errors())) from None


def _explain(err: Mapping[str, object]) -> str:
    """One pydantic error as ``LAKE_<NAME>=<value> ...; the fix``."""
    ctx = err.get("ctx")
    if err["type"] == "value_error" and isinstance(ctx, dict):
        return str(ctx["error"])  # our own checks already name the variable and the fix
    loc = err["loc"]
    field = str(loc[0]) if isinstance(loc, tuple) and loc else "?"
    name = field if field.startswith("LAKE_") else env_name(field)
    if str(err["type"]).startswith("int_"):
        return f"{name}={err['input']!r} is not an integer; fix it in the environment or .env"
    return f"{name}={err['input']!r}: {err['msg']}; fix it in the environment or .env"
