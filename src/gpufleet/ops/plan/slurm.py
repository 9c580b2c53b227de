"""The planned fabric as Slurm's ``topology.conf`` (the topology/tree plugin).

Each line names a switch and its children, nodes or switches, in Slurm's hostlist syntax
(``SwitchName=s0 Nodes=tux[0-3]``, ``SwitchName=s2 Switches=s[0-1]``). A tree cannot show that
every leaf links to every spine, so the spines of a pod are one logical switch above its leaf
groups, and a three-tier fabric's super-spines one more (``core``) above the pods. In a
rail-optimized fabric a leaf group (``su-NNN``) stands for its rail leaves: those nodes are one
hop apart rail by rail, which is what Slurm's tree should keep a job under.
"""

from __future__ import annotations

from gpufleet.model.cluster import ClusterSpec
from gpufleet.model.hostlist import compress as hostlist
from gpufleet.ops.plan.cluster_yaml import FRONTEND
from gpufleet.ops.plan.fabric import FabricPlan

CORE = "core"


def topology_conf(cluster: ClusterSpec, fabric: FabricPlan) -> str:
    nodes_of: dict[str, list[str]] = {}
    for n in cluster.nodes:
        nodes_of.setdefault(n.leaf, []).append(n.name)
    lines = [
        f"# Slurm topology.conf (TopologyPlugin=topology/tree) for {cluster.name},"
        " written by gpufleet plan.",
        f"# {_summary(fabric)}",
    ]
    if fabric.topology == "rail-optimized":
        lines.append(
            f"# Each su-NNN stands for its {fabric.rails} rail leaves (NIC i of every node in it"
            " goes to rail i's leaf)."
        )
    if fabric.tiers >= 2:
        lines.append(
            "# Each pod-N stands for its spines: every leaf links to every spine of its pod."
        )
    if fabric.tiers == 3:
        lines.append(f"# {CORE} stands for the {fabric.super_spines} super-spines.")
    for g in fabric.groups:
        lines.append(f"SwitchName={g.name} Nodes={hostlist(nodes_of[g.name])}")
    if fabric.tiers >= 2:
        for pod in fabric.pods:
            children = [g.name for g in fabric.groups if g.pod == pod]
            lines.append(f"SwitchName={pod} Switches={hostlist(children)}")
    if fabric.tiers == 3:
        lines.append(f"SwitchName={CORE} Switches={hostlist(fabric.pods)}")
    if FRONTEND in nodes_of:
        lines.append(f"# {FRONTEND}: CPU-only nodes, on the Ethernet frontend, off the GPU fabric.")
        lines.append(f"SwitchName={FRONTEND} Nodes={hostlist(nodes_of[FRONTEND])}")
    return "\n".join(lines) + "\n"


def _summary(f: FabricPlan) -> str:
    tiers = {1: "one switch", 2: "two tiers", 3: "three tiers"}[f.tiers]
    return (
        f"{f.topology}, {tiers}: {f.endpoints} endpoints × {f.link_gbps} Gb/s, {f.leaves} leaves,"
        f" {f.spines} spines, {f.super_spines} super-spines, {f.oversubscription}"
    )
