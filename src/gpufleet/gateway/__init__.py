"""Service endpoints: one stable address per service, load-balanced over its ready replicas.

``make_gateway()`` picks HAProxy, else nginx, else the built-in asyncio proxy (or the one
asked for). Health checking is gpufleet's: ``apply`` is given only the ready backends.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from gpufleet.gateway.base import Gateway, ServiceStats
from gpufleet.gateway.routes import Backend, ConfigError, GatewayError, ServiceRoute, validate

KINDS = ("haproxy", "nginx", "builtin")

__all__ = [
    "KINDS",
    "Backend",
    "ConfigError",
    "Gateway",
    "GatewayError",
    "ServiceRoute",
    "ServiceStats",
    "make_gateway",
    "validate",
]


def make_gateway(
    kind: str | None = None, bind_host: str = "127.0.0.1", pidfile: Path | None = None
) -> Gateway:
    """The gateway of ``kind``, or the first installed of haproxy, nginx, built-in.
    ``pidfile``: where a proxy process is named, so that the next controller stops the one a
    crashed controller left behind (the built-in proxy lives in the controller's process)."""
    if kind is None:
        kind = next((k for k in ("haproxy", "nginx") if shutil.which(k)), "builtin")
    if kind == "haproxy":
        from gpufleet.gateway.haproxy import HAProxyGateway

        return HAProxyGateway(bind_host, pidfile=pidfile)
    if kind == "nginx":
        from gpufleet.gateway.nginx import NginxGateway

        return NginxGateway(bind_host, pidfile=pidfile)
    if kind == "builtin":
        from gpufleet.gateway.builtin import BuiltinGateway

        return BuiltinGateway(bind_host)
    raise GatewayError(f"unknown gateway kind {kind!r}: one of {', '.join(KINDS)}")
