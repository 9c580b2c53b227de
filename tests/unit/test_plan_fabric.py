"""The fabric planner against hand-worked spine-leaf and rail-optimized examples.

256 nodes × 8 H100, one 400 Gb/s NIC per GPU, 64-port switches, 1:1 (non-blocking):
  endpoints   256 × 8 = 2,048
  a leaf      64 ports = 32 down + 32 up
  leaves      2,048 / 32 = 64 (rail-optimized: 8 groups of 32 nodes × 8 rails; spine-leaf:
              4 nodes of 8 NICs per leaf × 64)
  spines      64 leaves × 32 uplinks = 2,048 spine ports / 64 = 32 spines (one link from every
              leaf to every spine)
  cables      2,048 node–leaf + 2,048 leaf–spine = 4,096, all optical → optics 2 × 4,096 = 8,192
  bisection   2,048 × 400 Gb/s / 2 = 409.6 Tb/s
  hops        leaf – spine – leaf: 3 switches
2,048 = 64²/2 is exactly what two tiers hold; 512 nodes need a third:
  leaves      4,096 / 32 = 128 > 64
  pods        at most 64/2 = 32 leaves each (pod spines: 32 down + 32 up) → 4 pods of 4 rail groups
  spines      32 per pod → 128; pod-spine uplinks 128 × 32 = 4,096 / 64 = 64 super-spines
  cables      4,096 × 3 = 12,288 → optics 24,576; bisection 819.2 Tb/s; hops 5
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from gpufleet.model.cluster import ClusterSpec
from gpufleet.ops.plan import Plan, plan_from_data
from gpufleet.ops.plan.fabric import even_spread, leaf_ports, spine_count


def intent(nodes: int, gpus_per_node: int = 8, **sections: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "name": "t",
        "workload": {
            "kind": "training",
            "gpus": nodes * gpus_per_node,
            "gpu_model": "H100",
            "gpus_per_node": gpus_per_node,
        },
        "node": {"nic_gbps": 400},
        "network": {"switch_radix": 64},
    }
    for key, value in sections.items():
        spec[key] = {**spec.get(key, {}), **value}
    return spec


def plan(data: dict[str, Any]) -> Plan:
    return plan_from_data(data, source="t.yaml")


@pytest.mark.parametrize("topology", ["rail-optimized", "spine-leaf"])
def test_256_nodes_of_8_h100_on_64_port_switches(topology: str) -> None:
    f = plan(intent(256, network={"topology": topology})).fabric
    assert f.endpoints == 2048
    assert (f.leaf_downlinks, f.leaf_uplinks) == (32, 32)
    assert f.leaves == 64
    assert f.spines == 32 and f.super_spines == 0 and f.tiers == 2
    assert f.ports_used == f.ports_available == (64 + 32) * 64  # every port used
    assert (f.cables_node_leaf, f.cables_leaf_spine, f.cables_spine_super) == (2048, 2048, 0)
    assert f.dac_cables == 0  # 4 nodes per leaf, 3 nodes per 40 kW rack: the leaf is not ToR
    assert f.optics == 8192
    assert f.bisection_tbps == pytest.approx(409.6)
    assert f.max_hops == 3
    assert f.two_tier_max_endpoints == 64 * 64 // 2
    assert f.warnings == ()


def test_rail_groups_put_nic_i_of_32_nodes_on_rail_i_leaf() -> None:
    f = plan(intent(256)).fabric
    assert f.rails == 8
    assert [g.nodes for g in f.groups] == [32] * 8
    assert all(g.leaves == 8 and g.downlinks_per_leaf == 32 for g in f.groups)
    assert f.groups[1].name == "su-001" and f.groups[1].first_node == 32


def test_spine_leaf_groups_put_all_nics_of_4_nodes_on_one_leaf() -> None:
    f = plan(intent(256, network={"topology": "spine-leaf"})).fabric
    assert len(f.groups) == 64
    assert all(g.nodes == 4 and g.leaves == 1 and g.downlinks_per_leaf == 32 for g in f.groups)


def test_512_nodes_need_a_third_tier() -> None:
    p = plan(intent(512))
    f = p.fabric
    assert f.endpoints == 4096 and f.leaves == 128 and f.tiers == 3
    assert f.pods == ("pod-0", "pod-1", "pod-2", "pod-3")
    assert [sum(g.leaves for g in f.groups if g.pod == pod) for pod in f.pods] == [32] * 4
    assert f.spines_per_pod == (32, 32, 32, 32)
    assert f.super_spines == 64
    assert f.cables == 3 * 4096 and f.optics == 2 * 3 * 4096
    assert f.bisection_tbps == pytest.approx(819.2)
    assert f.max_hops == 5
    assert [w.code for w in f.warnings] == ["three-tier"]


def test_one_node_past_radix_squared_over_two_needs_three_tiers() -> None:
    assert plan(intent(256)).fabric.tiers == 2
    f = plan(intent(257)).fabric  # 2,056 endpoints > 64²/2
    assert f.tiers == 3
    assert len(f.groups) == 9 and f.leaves == 72 > 64


def test_oversubscription_splits_leaf_ports() -> None:
    assert leaf_ports(64, Fraction(1)) == (32, 32)
    assert leaf_ports(64, Fraction(3)) == (48, 16)
    assert leaf_ports(64, Fraction(2)) == (42, 21)
    f = plan(intent(256, network={"oversubscription": "3:1"})).fabric
    # 48 nodes per rail group → 6 groups (even spread: 43 nodes), 43 down → ⌈43/3⌉ = 15 up
    assert f.oversubscription == "3:1"
    assert f.leaves == 6 * 8 and f.leaf_uplinks == 15
    assert f.bisection_tbps == pytest.approx(48 * 15 * 400 / 2 / 1000)
    assert "oversubscribed" in [w.code for w in f.warnings]


def test_spines_divide_the_uplinks_and_are_never_alone() -> None:
    assert spine_count(64, 32, 64) == 32
    assert spine_count(8, 32, 64) == 4  # 8 parallel links from each leaf to each spine
    assert spine_count(2, 4, 8) == 2  # one would do by ports; two for redundancy
    assert spine_count(10, 21, 64) == 7  # ⌈210 / 64⌉ = 4 → the next divisor of 21


def test_one_leaf_is_one_tier_without_spines() -> None:
    f = plan(intent(2, network={"topology": "spine-leaf"})).fabric
    assert (f.tiers, f.leaves, f.spines, f.max_hops) == (1, 1, 0, 1)
    assert f.cables == 16 and f.dac_cables == 16 and f.optics == 0  # a ToR leaf in the rack
    assert f.bisection_tbps == pytest.approx(16 * 400 / 2 / 1000)


def test_groups_spread_nodes_as_cluster_spec_spreads_a_pool() -> None:
    leaves = [f"l{i}" for i in range(7)]
    spec = ClusterSpec.from_dict(
        {
            "fabric": [{"pod": "p", "leaves": leaves}],
            "pools": [
                {"name": "g", "count": 100, "cpu_cores": 1, "memory_gib": 1, "leaves": leaves}
            ],
        }
    )
    per_leaf = [sum(n.leaf == leaf for n in spec.nodes) for leaf in leaves]
    assert even_spread(100, 7) == per_leaf
