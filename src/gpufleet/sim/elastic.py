"""The simulator's provider of elastic pools, and what the nodes cost.

Whatever provider a pool names (``local``, ``command``: they reach real machines), in the
simulator a node asked for registers ``start_s`` later (the ``sim`` provider's option, default
120 s: a cloud GPU VM's boot). A node is paid for from the moment it is asked for until its
powering down ends (``ElasticNode.powered``: Slurm's SuspendTimeout after its release), as
clouds bill; fixed nodes all the time. ``node_hours`` is what the replay's JSON reports, fixed
or elastic; ``cost`` is node-hours × price: ``--node-hour-price`` for every node when given,
else each elastic pool's ``node_hour_cost`` (fixed nodes then cost nothing known: None
without any price).
"""

from __future__ import annotations

from collections.abc import Callable

from gpufleet.core.commands import PowerDown, PowerUp
from gpufleet.core.elastic.book import ElasticBook
from gpufleet.core.events import Event, NodeUp
from gpufleet.model.cluster import ClusterSpec, NodeSpec
from gpufleet.model.elastic import ElasticPool, ElasticSpec, Provider
from gpufleet.model.errors import SpecError

DEFAULT_START_S = 120.0


def start_s(provider: Provider) -> float:
    return float(provider.option("start_s", str(DEFAULT_START_S)) or DEFAULT_START_S)


class SimPower:
    """The Simulation's provider (``apply``) and meter (``account``)."""

    def __init__(self, cluster: ClusterSpec, price: float | None = None) -> None:
        self.fixed = len(cluster.nodes)
        self.price = price
        self.fixed_s = 0.0
        self.pool_s: dict[str, float] = {p.name: 0.0 for p in cluster.elastic}
        self.costs = {p.name: p.spec.node_hour_cost for p in cluster.elastic}
        self.peak = self.fixed  # the most nodes powered at once
        self.asked = 0  # nodes asked for over the run

    def apply(self, c: PowerUp | PowerDown, t: float, push: Callable[[float, Event], None]) -> None:
        if isinstance(c, PowerUp):
            self.asked += len(c.nodes)
            for spec in c.nodes:
                push(t + start_s(c.provider), NodeUp(spec))

    def account(self, dt: float, book: ElasticBook) -> None:
        self.fixed_s += self.fixed * dt
        powered = 0
        for n in book.nodes.values():
            if n.powered:
                powered += 1
                self.pool_s[n.pool] += dt
        self.peak = max(self.peak, self.fixed + powered)

    @property
    def node_hours(self) -> float:
        return (self.fixed_s + sum(self.pool_s.values())) / 3600

    @property
    def cost(self) -> float | None:
        if self.price is not None:
            return self.node_hours * self.price
        if not any(self.costs.values()):
            return None
        return sum(s / 3600 * self.costs[p] for p, s in self.pool_s.items())


def elastic_cluster(
    lo: int,
    hi: int,
    gpus_per_node: int,
    leaves: int,
    *,
    gpu_model: str,
    start: float = DEFAULT_START_S,
    idle_s: float = 600.0,
    price: float = 0.0,
) -> ClusterSpec:
    """A cluster of one elastic pool of identical nodes (``simulate replay --autoscale``),
    spread evenly over ``leaves`` leaf switches, with the simulator's provider."""
    if not 0 <= lo <= hi or hi < 1:
        raise SpecError(
            f"need 0 <= min ({lo}) <= max ({hi}) and max >= 1", field="--autoscale-min/max"
        )
    if leaves < 1 or leaves > hi:
        raise SpecError(f"must be 1 to --autoscale-max ({hi}), got {leaves}", field="--leaves")
    if not 0 <= start < 86_400 or not idle_s >= 0:
        raise SpecError("start and idle times must be >= 0 s", field="--autoscale-start-s")
    width = max(3, len(str(hi - 1)))
    nodes = tuple(
        NodeSpec(
            f"pool-{i:0{width}d}",
            gpu_model,
            gpus_per_node,
            128_000,
            1024 * 1024,
            f"leaf-{i * leaves // hi}",
            "pod-0",
            "pool",
        )
        for i in range(hi)
    )
    provider = Provider("sim", (("start_s", str(start)),))
    spec = ElasticSpec(lo, hi, provider, max(600.0, 2 * start), idle_s, price)
    leaf_names = tuple(dict.fromkeys(n.leaf for n in nodes))
    return ClusterSpec(
        "sim-elastic",
        (),
        tuple((x, "pod-0") for x in leaf_names),
        elastic=(ElasticPool("pool", spec, nodes),),
    )


def max_gpus(cluster: ClusterSpec) -> int:
    """The GPUs of every fixed node and of every elastic pool at its max."""
    return cluster.total_gpus + sum(n.gpus for p in cluster.elastic for n in p.nodes)
