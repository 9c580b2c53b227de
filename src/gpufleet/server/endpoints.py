"""Each service's endpoint on the gateway: its listen port and its bearer token.

Made when the service first gets routes (its creation), kept until it is removed, and stable
across restarts of the controller: a JSON file in the data directory (0600, written whole and
renamed into place), since clients hold both. The port is the lowest one of the configured
range that no other service holds and that no removed service gave up while this controller
ran; one given up is handed out again only once no other is free, the longest given up first
(a new service on the port of one just removed would be reached by its clients, and a page
left open on the old one would load the new one's while the proxy reloads). The token is 32
random bytes, URL-safe base64 (what ``gateway.routes`` accepts).
"""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from gpufleet.server.store.endpoints import EndpointStore

# below the kernel's ephemeral ports (32768 on) and above MASTER_PORT's range (29500-31499)
PORT_BASE = 31500
PORT_SPAN = 1000


@dataclass(frozen=True, slots=True)
class Endpoint:
    port: int
    token: str


class EndpointBook:
    def __init__(self, path: Path, port_base: int = PORT_BASE, port_span: int = PORT_SPAN) -> None:
        if not (port_base >= 1 and port_span >= 1 and port_base + port_span - 1 <= 65535):
            raise ValueError(
                f"gateway ports: {port_base}+{port_span} is not a range within 1-65535"
            )
        self.path = path
        self.port_base, self.port_span = port_base, port_span
        self._book: dict[str, Endpoint] = self._load()
        self._given_up: dict[int, None] = {}  # ports of removed services, longest ago first

    def reload(self) -> None:
        """Read the book again (a new leader: what the one before it handed out)."""
        self._book = self._load()

    def _load(self) -> dict[str, Endpoint]:
        try:
            raw = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as e:
            raise ValueError(f"{self.path}: cannot read the service endpoints: {e}") from None
        return {name: Endpoint(int(e["port"]), str(e["token"])) for name, e in raw.items()}

    def get(self, name: str) -> Endpoint | None:
        return self._book.get(name)

    def endpoint(self, name: str) -> Endpoint:
        """``name``'s endpoint, made (and saved) the first time it is asked for."""
        e = self._book.get(name)
        if e is not None:
            return e
        used = {e.port for e in self._book.values()}
        ports = range(self.port_base, self.port_base + self.port_span)
        port = next((p for p in ports if p not in used and p not in self._given_up), None)
        if port is None:
            port = next((p for p in self._given_up if p not in used), None)
        if port is None:
            raise ValueError(
                f"service {name}: every gateway port of {self.port_base}-"
                f"{self.port_base + self.port_span - 1} is taken"
            )
        e = Endpoint(port, secrets.token_urlsafe(32))
        self._book[name] = e
        self._save()
        self._given_up.pop(port, None)
        return e

    def rotate(self, name: str) -> Endpoint:
        """A new token for ``name``'s endpoint (its port stays); saved before it is used."""
        e = Endpoint(self.endpoint(name).port, secrets.token_urlsafe(32))
        self._book[name] = e
        self._save()
        return e

    def forget(self, name: str) -> None:
        e = self._book.pop(name, None)
        if e is not None:
            self._save()
            self._given_up[e.port] = None

    def _save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump({n: {"port": e.port, "token": e.token} for n, e in self._book.items()}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)


class StoredEndpointBook(EndpointBook):
    """The book in the store, shared by controllers in high availability (ADR 0044): the
    leader writes it (fenced by its epoch), a new one reads it back (``reload``, at its
    takeover), so a service keeps its port and token through a failover."""

    def __init__(
        self, store: EndpointStore, port_base: int = PORT_BASE, port_span: int = PORT_SPAN
    ) -> None:
        self.store = store
        super().__init__(Path(), port_base, port_span)

    def _load(self) -> dict[str, Endpoint]:
        return {name: Endpoint(p, t) for name, (p, t) in self.store.endpoints().items()}

    def _save(self) -> None:
        self.store.save_endpoints({n: (e.port, e.token) for n, e in self._book.items()})
