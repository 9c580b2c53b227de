"""Racks, power and cooling.

* Nodes per rack = min(⌊rack budget / node power⌋, ⌊rack units / node height⌋); a node above the
  budget still gets a rack of its own, with a warning. Where leaves sit in the nodes' racks
  (spine-leaf groups no larger than a rack), racks hold whole leaf groups.
* Cooling: liquid when a GPU's TDP reaches ``liquid_from_gpu_w`` (700 W) or a rack draws more than
  ``liquid_above_rack_kw`` (40 kW); else air. Air cannot hold 700 W parts under the
  60 °C GPU target (``sources.GPU_UNDER_60C``), and air-cooled rooms top out around 30–40 kW
  per rack.
* Network power = switches × ``network.switch_w``; leaf switches count there, not in the racks.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from gpufleet.ops.plan.fabric import FabricPlan
from gpufleet.ops.plan.findings import PlanWarning
from gpufleet.ops.plan.intent import PowerOptions
from gpufleet.ops.plan.node import NodePlan
from gpufleet.ops.plan.sources import GPU_UNDER_60C

Cooling = Literal["air", "liquid"]


@dataclass(frozen=True, slots=True)
class RackPlan:
    pool: str
    nodes_per_rack: int
    limited_by: str  # "power" or "space"
    racks: int
    rack_kw: float  # a full rack's draw
    cooling: Cooling
    cooling_reason: str


@dataclass(frozen=True, slots=True)
class FacilityPlan:
    racks: tuple[RackPlan, ...]
    compute_kw: float
    network_kw: float
    warnings: tuple[PlanWarning, ...]

    @property
    def total_racks(self) -> int:
        return sum(r.racks for r in self.racks)

    @property
    def total_kw(self) -> float:
        return self.compute_kw + self.network_kw

    @property
    def cooling(self) -> Cooling:
        return "liquid" if any(r.cooling == "liquid" for r in self.racks) else "air"


def nodes_per_rack(node: NodePlan, power: PowerOptions) -> tuple[int, str]:
    by_power = math.floor(power.rack_kw * 1000 / node.power.node_w)
    by_space = power.rack_units // node.rack_units
    if by_power <= by_space:
        return max(1, by_power), "power"
    return max(1, by_space), "space"


def plan_facility(
    nodes: Sequence[NodePlan],
    fabric: FabricPlan,
    power: PowerOptions,
    switch_w: int,
) -> FacilityPlan:
    racks: list[RackPlan] = []
    warnings: list[PlanWarning] = []
    for i, node in enumerate(nodes):
        per_rack, limit = nodes_per_rack(node, power)
        if node.power.node_w > power.rack_kw * 1000:
            warnings.append(
                PlanWarning(
                    "rack-power",
                    node.pool,
                    f"one node draws {node.power.node_w / 1000:.1f} kW, above the rack budget of"
                    f" {power.rack_kw:g} kW",
                    "a rack's feeds and cooling are sized for its budget; raise power.rack_kw or"
                    " plan a denser (liquid-cooled) rack",
                )
            )
        groups = [g for g in fabric.groups if g.member == i]
        if groups and all(g.dac for g in groups):  # whole leaf groups per rack
            per_rack_groups = max(1, per_rack // max(g.nodes for g in groups))
            count = math.ceil(len(groups) / per_rack_groups)
        else:
            count = math.ceil(node.count / per_rack)
        rack_kw = per_rack * node.power.node_w / 1000
        cooling, why = _cooling(node, rack_kw, power)
        if cooling == "liquid":
            warnings.append(
                PlanWarning(
                    "liquid-cooling",
                    node.pool,
                    f"liquid cooling: {why}",
                    "air cannot keep such GPUs under 60 °C, and air-cooled rooms top out near "
                    "30–40 kW per rack; plan direct-to-chip liquid cooling and its facility "
                    f"water; {GPU_UNDER_60C}",
                )
            )
        racks.append(RackPlan(node.pool, per_rack, limit, count, rack_kw, cooling, why))
    return FacilityPlan(
        racks=tuple(racks),
        compute_kw=sum(n.count * n.power.node_w for n in nodes) / 1000,
        network_kw=fabric.switches * switch_w / 1000,
        warnings=tuple(warnings),
    )


def _cooling(node: NodePlan, rack_kw: float, power: PowerOptions) -> tuple[Cooling, str]:
    reasons = []
    if node.gpus and node.gpu_tdp_w >= power.liquid_from_gpu_w:
        reasons.append(
            f"{node.gpu_model} TDP {node.gpu_tdp_w} W ≥ {power.liquid_from_gpu_w} W per GPU"
        )
    if rack_kw > power.liquid_above_rack_kw:
        reasons.append(f"{rack_kw:.1f} kW per rack > {power.liquid_above_rack_kw:g} kW")
    if reasons:
        return "liquid", "; ".join(reasons)
    return "air", (
        f"GPU TDP below {power.liquid_from_gpu_w} W and {rack_kw:.1f} kW per rack"
        f" ≤ {power.liquid_above_rack_kw:g} kW"
    )
