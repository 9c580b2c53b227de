"""The compute fabric: a spine-leaf (two tiers, three when needed) of ``radix``-port switches.

Ports are counted at the NIC's speed (a 64-port 400 Gb/s switch is 32 OSFP cages split in two).

* Leaf ports: with oversubscription o (downlinks : uplinks), a leaf gives ⌊radix·o/(1+o)⌋ ports
  to nodes and the rest up: 32 + 32 of 64 at 1:1, 48 + 16 at 3:1. A leaf wires
  ⌈(its busiest leaf's downlinks) / o⌉ uplinks, all leaves alike so that ECMP stays even.
* Leaf groups: nodes that share leaves. Spine-leaf puts all NICs of ⌊down / NICs⌋ nodes on one
  leaf. Rail-optimized gives each group of ``down`` nodes one leaf per rail: NIC i of every node
  goes to rail i's leaf, so the same GPU index on every node of a group is one hop apart (NCCL's
  rings and trees run rail by rail) and only cross-rail traffic climbs to the spines. A pool's
  nodes are spread evenly over its groups (as ``ClusterSpec`` spreads a pool over its leaves);
  pools do not share groups.
* Spines: a spine has one port per leaf or more, so two tiers join at most ``radix`` leaves, that
  is radix × down endpoints (radix²/2 at 1:1). Spines = the smallest divisor of the uplinks per
  leaf that gives enough spine ports (so every leaf has the same number of links to every spine),
  and at least 2 so that no spine is a single point of failure (``sources.NETWORK_REDUNDANCY``).
* Three tiers, beyond ``radix`` leaves: pods of at most radix/2 leaves, each with its own spines
  that use half their ports down and half up (non-blocking above the leaves), and super-spines
  = ⌈pod-spine uplinks / radix⌉ above them; at most ``radix`` pods.
* Cables: one per NIC (node–leaf), one per leaf uplink (leaf–spine), one per pod-spine uplink
  (spine–super-spine). Node–leaf links are DAC when the leaf can sit in its nodes' rack
  (spine-leaf with a group no larger than a rack); every other link is optical, with a
  transceiver at each end.
* Bisection bandwidth = min(endpoints, leaf uplinks) × link speed / 2; hops = switches on the
  longest path: 1, 3 (leaf–spine–leaf) or 5.

Hand-worked: 256 nodes × 8 NICs of 400 Gb/s on 64-port switches at 1:1 → 2,048 endpoints; a leaf
has 32 down + 32 up; 64 leaves (rail-optimized: 8 groups of 32 nodes × 8 rails); 64 × 32 = 2,048
uplinks → 32 spines of 64 ports; cables 2,048 + 2,048, optics 8,192; bisection 2,048 × 400 Gb/s
/ 2 = 409.6 Tb/s; 3 hops. 2,048 endpoints is exactly 64²/2: one more node needs a third tier.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

from gpufleet.model.errors import SpecError
from gpufleet.ops.plan.findings import PlanWarning
from gpufleet.ops.plan.intent import NetworkOptions, TopologyKind


@dataclass(frozen=True, slots=True)
class FabricMember:
    """The GPU nodes of one node group, as the fabric sees them."""

    index: int  # into PlanSpec.groups
    pool: str
    nodes: int
    nics: int


@dataclass(frozen=True, slots=True)
class LeafGroup:
    """Nodes that share their leaves: the ``leaf`` of the ClusterSpec and of Slurm's tree."""

    name: str
    pod: str
    member: int  # FabricMember.index
    pool: str
    first_node: int  # index of its first node within the pool
    nodes: int
    leaves: int  # physical leaf switches: 1 (spine-leaf) or one per rail
    downlinks_per_leaf: int
    dac: bool  # node–leaf links are DAC (the leaf sits in the nodes' rack)


@dataclass(frozen=True, slots=True)
class FabricPlan:
    topology: TopologyKind
    radix: int
    link_gbps: int
    oversubscription: str  # "1:1", "3:1"
    endpoints: int
    rails: int
    leaf_downlinks: int  # ports a leaf may give to nodes at this oversubscription
    leaf_uplinks: int  # uplinks wired on every leaf
    groups: tuple[LeafGroup, ...]
    pods: tuple[str, ...]
    tiers: int
    leaves: int
    spines_per_pod: tuple[int, ...]
    super_spines: int
    ports_available: int
    ports_used: int
    cables_node_leaf: int
    cables_leaf_spine: int
    cables_spine_super: int
    dac_cables: int
    optical_cables: int
    optics: int
    bisection_tbps: float
    max_hops: int
    two_tier_max_endpoints: int
    warnings: tuple[PlanWarning, ...]

    @property
    def spines(self) -> int:
        return sum(self.spines_per_pod)

    @property
    def switches(self) -> int:
        return self.leaves + self.spines + self.super_spines

    @property
    def cables(self) -> int:
        return self.cables_node_leaf + self.cables_leaf_spine + self.cables_spine_super


def leaf_ports(radix: int, oversubscription: Fraction) -> tuple[int, int]:
    """(downlinks, uplinks) of a full leaf: down/up ≤ oversubscription, down + up ≤ radix."""
    down = math.floor(radix * oversubscription / (1 + oversubscription))
    while down > 0 and down + math.ceil(down / oversubscription) > radix:
        down -= 1
    return down, math.ceil(down / oversubscription)


def even_spread(items: int, bins: int) -> list[int]:
    """How many of ``items`` land in each bin when item i goes to bin ⌊i·bins/items⌋."""
    counts = [0] * bins
    for i in range(items):
        counts[i * bins // items] += 1
    return counts


def spine_count(leaves: int, uplinks: int, ports: int) -> int:
    """Spines for ``leaves`` × ``uplinks``: a divisor of ``uplinks`` (even links per spine)."""
    need = max(math.ceil(leaves * uplinks / ports), min(2, uplinks))
    return next(s for s in range(need, uplinks + 1) if uplinks % s == 0)


def ratio_text(r: Fraction) -> str:
    return f"{r.numerator}:{r.denominator}"


def plan_fabric(
    members: Sequence[FabricMember],
    net: NetworkOptions,
    *,
    topology: TopologyKind,
    link_gbps: int,
    workload: str,
    nodes_per_rack: Mapping[int, int],
    source: str,
) -> FabricPlan:
    radix, over = net.switch_radix, net.oversubscription
    rail = topology == "rail-optimized"
    down, _ = leaf_ports(radix, over)
    if down == 0:
        raise SpecError("leaves have no downlinks left", source=source, field="network")
    shapes = _group_shapes(members, down, rail, nodes_per_rack, source)
    n_leaves = sum(s.leaves for s in shapes)
    endpoints = sum(m.nodes * m.nics for m in members)
    tiers = 1 if n_leaves == 1 else 2 if n_leaves <= radix else 3
    up = 0 if tiers == 1 else math.ceil(Fraction(max(s.downlinks_per_leaf for s in shapes)) / over)
    pods = _pods(shapes, radix, tiers, source)
    groups = _name(shapes, pods, rail)
    pod_names = tuple(dict.fromkeys(g.pod for g in groups))
    if tiers == 1:
        spines_per_pod: tuple[int, ...] = (0,)
    elif tiers == 2:
        spines_per_pod = (spine_count(n_leaves, up, radix),)
    else:
        spines_per_pod = tuple(
            spine_count(sum(g.leaves for g in groups if g.pod == p), up, radix // 2)
            for p in pod_names
        )
    uplinks = n_leaves * up
    super_spines = max(2, math.ceil(uplinks / radix)) if tiers == 3 else 0
    leaf_spine = uplinks
    spine_super = uplinks if tiers == 3 else 0
    dac = sum(g.nodes * _nics(members, g.member) for g in groups if g.dac)
    optical = endpoints - dac + leaf_spine + spine_super
    switches = n_leaves + sum(spines_per_pod) + super_spines
    bisection_links = endpoints if tiers == 1 else min(endpoints, uplinks)
    warnings = _warnings(n_leaves, radix, down, over, tiers, super_spines, workload)
    return FabricPlan(
        topology=topology,
        radix=radix,
        link_gbps=link_gbps,
        oversubscription=ratio_text(over),
        endpoints=endpoints,
        rails=max(m.nics for m in members) if rail else 0,
        leaf_downlinks=down,
        leaf_uplinks=up,
        groups=groups,
        pods=pod_names,
        tiers=tiers,
        leaves=n_leaves,
        spines_per_pod=spines_per_pod,
        super_spines=super_spines,
        ports_available=switches * radix,
        ports_used=endpoints + 2 * leaf_spine + 2 * spine_super,
        cables_node_leaf=endpoints,
        cables_leaf_spine=leaf_spine,
        cables_spine_super=spine_super,
        dac_cables=dac,
        optical_cables=optical,
        optics=2 * optical,
        bisection_tbps=bisection_links * link_gbps / 2 / 1000,
        max_hops=2 * tiers - 1,
        two_tier_max_endpoints=radix * down,
        warnings=warnings,
    )


def _nics(members: Sequence[FabricMember], index: int) -> int:
    return next(m.nics for m in members if m.index == index)


def _group_shapes(
    members: Sequence[FabricMember],
    down: int,
    rail: bool,
    nodes_per_rack: Mapping[int, int],
    source: str,
) -> list[LeafGroup]:
    """Leaf groups, not yet named nor placed in pods."""
    out: list[LeafGroup] = []
    for m in members:
        size = down if rail else down // m.nics
        if size == 0:
            raise SpecError(
                f"a node's {m.nics} NICs need more than the {down} downlinks of one leaf",
                source=source,
                field="network.switch_radix",
            )
        first = 0
        for nodes in even_spread(m.nodes, math.ceil(m.nodes / size)):
            tor = not rail and nodes <= nodes_per_rack.get(m.index, 0)
            out.append(
                LeafGroup(
                    name="",
                    pod="",
                    member=m.index,
                    pool=m.pool,
                    first_node=first,
                    nodes=nodes,
                    leaves=m.nics if rail else 1,
                    downlinks_per_leaf=nodes if rail else nodes * m.nics,
                    dac=tor,
                )
            )
            first += nodes
    return out


def _pods(shapes: Sequence[LeafGroup], radix: int, tiers: int, source: str) -> list[int]:
    """The pod of each group: all in one below three tiers, else packed ≤ radix/2 leaves."""
    if tiers < 3:
        return [0] * len(shapes)
    half = radix // 2
    pods: list[int] = []
    pod, used = 0, 0
    for s in shapes:
        if s.leaves > half:
            raise SpecError(
                f"a rail group of {s.leaves} leaves does not fit a pod of {half} leaves",
                source=source,
                field="network.switch_radix",
            )
        if used + s.leaves > half:
            pod, used = pod + 1, 0
        pods.append(pod)
        used += s.leaves
    if pod + 1 > radix:
        raise SpecError(
            f"{pod + 1} pods exceed the {radix} that a three-tier fabric of {radix}-port switches"
            " joins (a fourth tier is not planned); use switches with more ports",
            source=source,
            field="network.switch_radix",
        )
    return pods


def _name(shapes: Sequence[LeafGroup], pods: Sequence[int], rail: bool) -> tuple[LeafGroup, ...]:
    # "su": a scalable unit, a group of nodes with one leaf per rail (NVIDIA SuperPOD's term)
    prefix = "su" if rail else "leaf"
    width = max(3, len(str(len(shapes) - 1)))
    out = []
    for i, (s, pod) in enumerate(zip(shapes, pods, strict=True)):
        out.append(
            LeafGroup(
                name=f"{prefix}-{i:0{width}d}",
                pod=f"pod-{pod}",
                member=s.member,
                pool=s.pool,
                first_node=s.first_node,
                nodes=s.nodes,
                leaves=s.leaves,
                downlinks_per_leaf=s.downlinks_per_leaf,
                dac=s.dac,
            )
        )
    return tuple(out)


def _warnings(
    leaves: int,
    radix: int,
    down: int,
    over: Fraction,
    tiers: int,
    super_spines: int,
    workload: str,
) -> tuple[PlanWarning, ...]:
    out: list[PlanWarning] = []
    if tiers == 3:
        out.append(
            PlanWarning(
                "three-tier",
                "fabric",
                f"{leaves} leaves: more than the {radix} that two tiers of {radix}-port switches"
                f" join; {super_spines} super-spines added",
                f"a spine has one port per leaf, so two tiers hold at most {radix} leaves ="
                f" {radix * down} endpoints at {ratio_text(over)}; the third tier adds switches,"
                " optics and 2 hops",
            )
        )
    if over > 1 and workload == "training":
        out.append(
            PlanWarning(
                "oversubscribed",
                "fabric",
                f"leaves are oversubscribed {ratio_text(over)}",
                "training's all-reduce crosses the spines at full rate from every GPU at once;"
                " an oversubscribed fabric slows every step of a job larger than a leaf group",
            )
        )
    return tuple(out)
