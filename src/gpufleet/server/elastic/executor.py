"""The driver's executor with elastic pools: PowerUp and PowerDown go to their pool's
provider on a worker thread (a script or a process start never blocks the loop), in order per
pool; a provider that fails posts ``PowerFailed`` for its nodes back on the loop. The rest goes
to the inner executor (the agents') at once."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

from gpufleet.core.commands import Command, PowerDown, PowerUp
from gpufleet.core.events import Event, PowerFailed
from gpufleet.core.executor import Executor
from gpufleet.server.elastic.providers import PowerProvider

log = logging.getLogger("gpufleet.elastic")


class WithPower:
    def __init__(
        self,
        inner: Executor,
        providers: Mapping[str, PowerProvider],
        post: Callable[[Event], None],
        hop: Callable[[Callable[[], None]], None],
        pool: ThreadPoolExecutor,
    ) -> None:
        self.inner = inner
        self.providers = providers
        self.post = post  # on the loop
        self.hop = hop  # from a worker thread to the loop
        self.pool = pool  # one thread: the asks are made in the core's order

    def apply(self, commands: Sequence[Command]) -> None:
        rest: list[Command] = []
        for c in commands:
            if isinstance(c, PowerUp | PowerDown):
                self.pool.submit(self._run, c)
            else:
                rest.append(c)
        if rest:
            self.inner.apply(rest)

    def _run(self, c: PowerUp | PowerDown) -> None:
        provider = self.providers.get(c.pool)
        names = [n.name for n in c.nodes] if isinstance(c, PowerUp) else list(c.nodes)
        try:
            if provider is None:
                raise RuntimeError(f"no provider for pool {c.pool}")
            if isinstance(c, PowerUp):
                provider.resume(c.pool, c.nodes)
            else:
                provider.suspend(c.pool, c.nodes)
        except Exception as e:
            why = str(e) or type(e).__name__
            log.warning("pool %s: %s of %s failed: %s", c.pool, type(c).__name__, names, why)
            if isinstance(c, PowerUp):
                events = [PowerFailed(n, f"provider failed: {why}") for n in names]

                def tell() -> None:
                    for ev in events:
                        self.post(ev)

                self.hop(tell)


def power_pool() -> ThreadPoolExecutor:
    """The one worker thread the providers run on (the asks made in the core's order)."""
    return ThreadPoolExecutor(1, thread_name_prefix="gpufleet-elastic")
