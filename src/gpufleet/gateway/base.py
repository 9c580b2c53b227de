"""The interface every gateway implementation has (HAProxy, nginx, built-in)."""

from __future__ import annotations

import abc
from dataclasses import dataclass

from gpufleet.gateway.routes import ServiceRoute


@dataclass(frozen=True)
class ServiceStats:
    """Counters for one service since the gateway started; they survive apply(). A rate reader
    should still treat a decrease as a reset (a restarted gateway starts from 0)."""

    requests: int  # requests received, including ones refused with 401
    status_4xx: int  # responses 400-499 sent to clients (the 401s of the token check among them)
    status_5xx: int  # responses 500-599 sent to clients (from backends or the proxy itself)
    # refused by the gateway's token check (401; a backend's own 401 is not one): among
    # ``requests`` and ``status_4xx``. ``requests - unauthorized`` never goes down
    unauthorized: int = 0
    connections: int = 0  # client connections open now (a WebSocket among them); 0: not known


class Gateway(abc.ABC):
    """One stable endpoint per service on ``bind_host``; ``apply`` replaces the whole set."""

    kind: str

    def __init__(self, bind_host: str = "127.0.0.1") -> None:
        self.bind_host = bind_host

    @abc.abstractmethod
    def start(self) -> None:
        """Start the proxy (with no services until ``apply``)."""

    @abc.abstractmethod
    def apply(self, services: list[ServiceRoute]) -> None:
        """Serve exactly ``services`` from now on, without dropping open connections.
        Raises ConfigError (with the proxy's own message) and keeps the old config."""

    @abc.abstractmethod
    def stats(self) -> dict[str, ServiceStats]:
        """Request counters per service name."""

    @abc.abstractmethod
    def stop(self) -> None:
        """Stop the proxy (hard)."""

    def __enter__(self) -> Gateway:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
