"""Spark Connect client channel: the token goes over gRPC local credentials to any loopback LAKE_HOST, TLS otherwise."""

from __future__ import annotations

from typing import Any

import grpc  # type: ignore[import-untyped]
import pytest

from spark_jobs.session import _loopback_channel_builder, is_loopback


@pytest.mark.parametrize(("host", "loopback"), [("localhost", True), ("127.0.0.1", True), ("127.0.0.2", True),
                                                ("::1", True), ("[::1]", True), ("10.1.2.3", False),
                                                ("spark.example.com", False)])
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def _credentials_used(monkeypatch: pytest.MonkeyPatch, url: str) -> list[str]:
    """Which channel credentials the builder asks gRPC for (both spies hand back real local credentials)."""
    used: list[str] = []
    real_local = grpc.local_channel_credentials

    def spy(kind: str) -> Any:
        def make(*_a: Any, **_k: Any) -> Any:
            used.append(kind)
            return real_local()
        return make

    monkeypatch.setattr(grpc, "local_channel_credentials", spy("local"))
    monkeypatch.setattr(grpc, "ssl_channel_credentials", spy("ssl"))
    _loopback_channel_builder(url).toChannel().close()
    return used


def test_token_to_a_loopback_alias_uses_local_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _credentials_used(monkeypatch, "sc://127.0.0.2:15002/;token=secret") == ["local"]


def test_token_to_another_host_still_needs_tls(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _credentials_used(monkeypatch, "sc://10.1.2.3:15002/;token=secret") == ["ssl"]

