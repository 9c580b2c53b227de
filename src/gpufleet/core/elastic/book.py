"""Where each node of an elastic pool stands in its power cycle, as Slurm's power saving names
the states (sinfo's suffixes in brackets):

- ``powered_down`` (``idle~``): no machine; the pool may resume it;
- ``powering_up`` (``idle#``): the provider was asked for it; it must register within the
  pool's ``resume_timeout_s`` (Slurm's ResumeTimeout) or it fails;
- ``up``: registered, an ordinary node of the cluster state (the scheduler sees only these);
- ``powering_down`` (``idle%``): released; a registration meanwhile (its agent's last
  heartbeat) is ignored until ``SUSPEND_TIMEOUT_S`` has passed (Slurm's SuspendTimeout);
- ``power_failed`` (``down~``): its provider failed or it did not register in time; the pool
  does not resume it again until an admin resumes the node (Slurm: DOWN+POWERED_DOWN).

Pure: times are numbers passed in."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from enum import StrEnum

from gpufleet.model.cluster import NodeSpec
from gpufleet.model.elastic import ElasticPool

SUSPEND_TIMEOUT_S = 30.0  # Slurm's SuspendTimeout default


class Power(StrEnum):
    DOWN = "powered_down"
    RESUMING = "powering_up"
    UP = "up"
    SUSPENDING = "powering_down"
    FAILED = "power_failed"


@dataclass(slots=True)
class ElasticNode:
    spec: NodeSpec
    pool: str
    power: Power = Power.DOWN
    since: float = 0.0  # when it entered its power state
    until: float = 0.0  # resume deadline (powering_up), end of powering_down
    idle_since: float | None = None  # up and running nothing since then
    why: str = ""

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def powered(self) -> bool:
        """A machine exists (and is paid for): asked for, up, or being released."""
        return self.power in (Power.RESUMING, Power.UP, Power.SUSPENDING)


class ElasticBook:
    def __init__(self, pools: Iterable[ElasticPool]) -> None:
        self.pools: dict[str, ElasticPool] = {p.name: p for p in pools}
        self.nodes: dict[str, ElasticNode] = {
            n.name: ElasticNode(n, p.name) for p in self.pools.values() for n in p.nodes
        }

    def __contains__(self, name: object) -> bool:
        return name in self.nodes

    def get(self, name: str) -> ElasticNode | None:
        return self.nodes.get(name)

    def of_pool(self, pool: str) -> Iterator[ElasticNode]:
        return (n for n in self.nodes.values() if n.pool == pool)

    def in_state(self, *powers: Power) -> list[ElasticNode]:
        return [n for n in self.nodes.values() if n.power in powers]

    def counted(self, pool: str) -> int:
        """The pool's nodes that count towards its min and max: up or on their way."""
        return sum(1 for n in self.of_pool(pool) if n.power in (Power.RESUMING, Power.UP))

    @property
    def powered_count(self) -> int:
        return sum(1 for n in self.nodes.values() if n.powered)

    def move(self, node: ElasticNode, power: Power, now: float, why: str = "") -> None:
        node.power, node.since, node.why = power, now, why
        node.idle_since = now if power is Power.UP else None

    def specs(self, nodes: Sequence[ElasticNode]) -> tuple[NodeSpec, ...]:
        return tuple(n.spec for n in nodes)
