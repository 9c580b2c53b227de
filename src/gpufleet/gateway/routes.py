"""What a gateway serves: one route per service (a listen port, a bearer token, ready backends).

Validation is strict on purpose: names and tokens are written into HAProxy/nginx config files,
so anything outside a small safe alphabet is refused here rather than quoted there.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
# RFC 6750 b64token, minus "=" padding in the middle; nothing a config parser treats specially
_TOKEN = re.compile(r"^[A-Za-z0-9._~+/-]{16,256}=*$")
_DIGEST = re.compile(r"^[0-9a-f]{64}$")  # SHA-256, lowercase hex
_HOST = re.compile(r"^[A-Za-z0-9.-]{1,253}$|^\[[0-9a-fA-F:]+\]$")
_KEY = re.compile(r"^[0-9a-f]{32,128}$")  # a desktop replica's key: lowercase hex
# the header a proxy adds to each request to a backend with a key (a desktop's session lets
# in no connection whose first request lacks it: ops/desktop_key.py); a client's own is dropped
KEY_HEADER = "X-Gpufleet-Desktop-Key"


class GatewayError(Exception):
    """The gateway could not do what was asked (the proxy's own message is in the text)."""


class ConfigError(GatewayError):
    """The routes, or the config made from them, were refused; the old config keeps running."""


@dataclass(frozen=True)
class Backend:
    """One ready replica: ``host:port``, with an optional relative weight (1–256), and for a
    desktop's replica the key the proxy presents to it (``KEY_HEADER``; "" for none)."""

    host: str
    port: int
    weight: int = 1
    key: str = field(default="", repr=False, compare=True)

    @classmethod
    def parse(cls, text: str, weight: int = 1) -> Backend:
        host, sep, port = text.rpartition(":")
        if not sep or not port.isdigit():
            raise ValueError(f"backend {text!r}: expected host:port")
        return cls(host, int(port), weight)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class ServiceRoute:
    """One stable endpoint: ``listen_port`` on the gateway's address, load-balanced over
    ``backends`` (only the ready ones: gpufleet does the health checking, not the proxy)."""

    name: str
    listen_port: int
    token: str
    backends: tuple[Backend, ...] = field(default_factory=tuple)
    # a desktop's route (model Desktop): the SHA-256 (hex) of each gpufleet token that may
    # open it (its owner's, the admins'); then ``token`` is refused, and a client presents
    # its own token as a bearer or as the cookie the login page sets (gateway/viewers.py).
    # Empty: an ordinary service, let in by ``token``
    viewers: tuple[str, ...] = ()

    @property
    def desktop(self) -> bool:
        return bool(self.viewers)


def validate(routes: list[ServiceRoute]) -> None:
    """Raise ConfigError listing every problem (all at once), or return."""
    problems: list[str] = []
    names: set[str] = set()
    ports: dict[int, str] = {}
    for i, r in enumerate(routes):
        where = f"service[{i}] {r.name!r}"
        if not _NAME.match(r.name):
            problems.append(f"{where}: name must be lowercase letters, digits and '-' (1-63)")
        if r.name in names:
            problems.append(f"{where}: duplicate service name")
        names.add(r.name)
        if not 1 <= r.listen_port <= 65535:
            problems.append(f"{where}: listen port {r.listen_port} not in 1-65535")
        elif r.listen_port in ports:
            problems.append(
                f"{where}: listen port {r.listen_port} already used by {ports[r.listen_port]!r}"
            )
        else:
            ports[r.listen_port] = r.name
        if not _TOKEN.match(r.token):
            problems.append(
                f"{where}: token must be 16-256 characters of A-Z a-z 0-9 . _ ~ + / - "
                "(optionally ending in '=')"
            )
        if not all(_DIGEST.match(v) for v in r.viewers):
            problems.append(f"{where}: each viewer must be a SHA-256 in lowercase hex")
        seen: set[str] = set()
        for j, b in enumerate(r.backends):
            bw = f"{where} backend[{j}] {b.address!r}"
            if not _HOST.match(b.host):
                problems.append(f"{bw}: bad host")
            if not 1 <= b.port <= 65535:
                problems.append(f"{bw}: port not in 1-65535")
            if not 1 <= b.weight <= 256:
                problems.append(f"{bw}: weight {b.weight} not in 1-256")
            if b.key and not _KEY.match(b.key):
                problems.append(f"{bw}: a key must be 32-128 characters of lowercase hex")
            if b.address in seen:
                problems.append(f"{bw}: listed twice")
            seen.add(b.address)
    if problems:
        raise ConfigError("invalid service routes:\n  " + "\n  ".join(problems))
