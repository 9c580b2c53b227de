"""How long the controller's event loop waits when the core changes a service's routes.

``WithGateway.apply`` is what the driver calls in its step, on the loop: this times that call
(the loop is blocked for it) and, apart, how long until the proxy serves the new routes. A real
proxy (``KIND``: haproxy, nginx, builtin), two real backends, 20 route changes (the first, the
proxy's start, left out). Runs against any tree (``PYTHONPATH=<tree>/src``): it takes
``WithGateway`` with or without its ``hop`` argument, so a tree from before the gateway's thread
can be measured in the same session.

    PYTHONPATH=src .venv/bin/python bench/gateway_apply_block.py haproxy
"""

import inspect
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from gpufleet.core.commands import RouteBackend, Routes
from gpufleet.gateway import make_gateway
from gpufleet.server.endpoints import EndpointBook
from gpufleet.server.gateway_executor import ServiceGateway, WithGateway

try:
    from gpufleet.ops.http_backends import BackendProcess, free_port
except ImportError:  # a tree from before the benchmarks left the package
    from gpufleet.benchmarks.http_backends import (  # type: ignore[import-not-found, no-redef]
        BackendProcess,
        free_port,
    )

CHANGES = 20


@dataclass
class Link:
    address: str


class Agents:
    def apply(self, commands: object) -> None:
        pass


def main(kind: str) -> None:
    backends = [BackendProcess(f"b{i}") for i in range(2)]
    book = EndpointBook(Path(tempfile.mkdtemp()) / "endpoints.json", free_port(), 1)
    gw = ServiceGateway(make_gateway(kind), book, {"n": Link("127.0.0.1")})
    try:
        if "hop" in inspect.signature(WithGateway).parameters:
            ex = WithGateway(Agents(), gw, lambda d, f: None, lambda f: None)
        else:  # before the proxy had a thread of its own
            ex = WithGateway(Agents(), gw, lambda d, f: None)  # type: ignore[call-arg]
        blocked, whole = [], []
        for i in range(CHANGES):
            routes = tuple(RouteBackend(f"s.{j}", "n", backends[j].port) for j in range(1 + i % 2))
            t0 = time.perf_counter()
            ex.apply([Routes("s", routes)])
            t1 = time.perf_counter()
            applied = getattr(gw, "applied", None)
            if applied is not None:
                applied.result(30)
            t2 = time.perf_counter()
            blocked.append(t1 - t0)
            whole.append(t2 - t0)

        def q(xs: list[float]) -> str:
            return f"median {statistics.median(xs) * 1000:.1f} ms, max {max(xs) * 1000:.1f} ms"

        print(f"{kind}: the loop blocked {q(blocked[1:])}; the proxy serving {q(whole[1:])}")
    finally:
        gw.stop()
        for b in backends:
            b.kill()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "haproxy")
