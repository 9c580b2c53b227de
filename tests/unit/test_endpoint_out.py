"""The endpoint URL a service's users are given: the gateway's own address, an IPv6 one in
brackets, and for a gateway on every address (0.0.0.0, ::) this host's name, which a client on
another machine can reach (looked up once, not per service shown)."""

from __future__ import annotations

import socket

import pytest

from gpufleet.server import service_views
from gpufleet.server.service_views import endpoint_out


def test_the_url_names_the_gateways_address() -> None:
    e = endpoint_out("10.1.2.3", 30001, "tok")
    assert (e.url, e.host, e.port, e.token) == ("http://10.1.2.3:30001", "10.1.2.3", 30001, "tok")
    assert endpoint_out("fd00::7", 30002).url == "http://[fd00::7]:30002"
    assert endpoint_out("127.0.0.1", 30003).token is None


def test_a_wildcard_address_is_named_by_this_hosts_name_looked_up_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lookups: list[str] = []

    def getfqdn(name: str = "") -> str:
        lookups.append(name)
        return "gpu-head.example.org"

    monkeypatch.setattr(socket, "getfqdn", getfqdn)
    service_views._this_host.cache_clear()
    try:
        for host in ("0.0.0.0", "::", "0.0.0.0"):
            e = endpoint_out(host, 30004)
            assert (e.url, e.host) == ("http://gpu-head.example.org:30004", "gpu-head.example.org")
        assert len(lookups) == 1
    finally:
        service_views._this_host.cache_clear()
