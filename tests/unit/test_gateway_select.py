"""Which gateway ``make_gateway`` picks, and what routes it refuses before any proxy runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.gateway import (
    Backend,
    ConfigError,
    GatewayError,
    ServiceRoute,
    make_gateway,
    validate,
)


def test_without_haproxy_or_nginx_on_path_the_builtin_proxy_is_chosen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert make_gateway().kind == "builtin"
    with pytest.raises(GatewayError, match="apt-get install -y haproxy"):
        make_gateway("haproxy")


def test_the_first_found_is_chosen(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nginx = tmp_path / "nginx"
    nginx.write_text("#!/bin/sh\n")
    nginx.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert make_gateway().kind == "nginx"
    (tmp_path / "haproxy").symlink_to(nginx)
    assert make_gateway().kind == "haproxy"


def test_unknown_kind() -> None:
    with pytest.raises(GatewayError, match="one of haproxy, nginx, builtin"):
        make_gateway("envoy")


def test_routes_that_a_config_file_could_be_tricked_by_are_refused() -> None:
    token = 'abcdefghijklmnop" hdr x'  # would close the quoted string in haproxy.cfg
    routes = [
        ServiceRoute("a", 8000, token, ()),
        ServiceRoute("a", 8000, "x" * 20, (Backend("h;x", 1), Backend("h", 1), Backend("h", 1))),
    ]
    with pytest.raises(ConfigError) as err:
        validate(routes)
    text = str(err.value)
    for what in (
        "token must be",
        "duplicate service name",
        "already used by 'a'",
        "bad host",
        "listed twice",
    ):
        assert what in text, text
