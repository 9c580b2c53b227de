"""Each service's gateway port and token where controllers are in high availability (ADR
0044): the leader writes them (fenced by its epoch, as every write), a new leader reads them
back, so a service's clients keep their address and token through a failover."""

from __future__ import annotations

import sqlalchemy as sa

from gpufleet.server.store.connections import Connections
from gpufleet.server.store.schema import endpoints

_E = endpoints.c


class EndpointStore(Connections):
    def endpoints(self) -> dict[str, tuple[int, str]]:
        """service → (port, token)."""
        with self._read() as c:
            rows = c.execute(sa.select(_E.service, _E.port, _E.token)).all()
        return {r.service: (int(r.port), str(r.token)) for r in rows}

    def save_endpoints(self, book: dict[str, tuple[int, str]]) -> None:
        """The whole set, in one transaction (a book is small: one row per service)."""
        with self._write() as c:
            c.execute(sa.delete(endpoints))
            if book:
                c.execute(
                    sa.insert(endpoints),
                    [{"service": n, "port": p, "token": t} for n, (p, t) in book.items()],
                )
