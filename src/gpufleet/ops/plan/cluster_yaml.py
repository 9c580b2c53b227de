"""The ClusterSpec the scheduler runs on, with pools placed in the planned fabric.

Each leaf group of the fabric becomes a ``leaf`` of the spec and each pod a ``pod``; a pool lists
its groups in order, and ``ClusterSpec.from_dict`` spreads its nodes evenly over them exactly as
the fabric did. CPU-only nodes (login, services) are off the GPU fabric: they sit in a leaf and
pod named ``frontend``. A cluster given as input keeps its pools, nodes and queues as written;
only their leaves change.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from gpufleet.ops.plan.fabric import FabricPlan
from gpufleet.ops.plan.intent import PlanSpec
from gpufleet.ops.plan.node import NodePlan

FRONTEND = "frontend"


def cluster_document(
    spec: PlanSpec, nodes: Sequence[NodePlan], fabric: FabricPlan
) -> dict[str, Any]:
    leaves_of: dict[int, list[str]] = {}
    for g in fabric.groups:
        leaves_of.setdefault(g.member, []).append(g.name)
    fabric_doc: list[dict[str, Any]] = [
        {"pod": pod, "leaves": [g.name for g in fabric.groups if g.pod == pod]}
        for pod in fabric.pods
    ]
    if any(i not in leaves_of for i in range(len(spec.groups))):
        fabric_doc.append({"pod": FRONTEND, "leaves": [FRONTEND]})
    pools: list[dict[str, Any]] = []
    explicit: list[dict[str, Any]] = []
    for i, (group, node) in enumerate(zip(spec.groups, nodes, strict=True)):
        leaves = leaves_of.get(i, [FRONTEND])
        if not group.is_pool:
            for k, entry in enumerate(group.entries):
                explicit.append(_placed(entry, leaf=leaves[k * len(leaves) // group.count]))
        elif group.entries:
            pools.append(_placed(group.entries[0], leaves=leaves))
        else:
            pools.append(_planned_pool(node, leaves))
    doc: dict[str, Any] = {"name": spec.cluster_name, "fabric": fabric_doc}
    if pools:
        doc["pools"] = pools
    if explicit:
        doc["nodes"] = explicit
    if spec.queues:
        doc["queues"] = [copy.deepcopy(dict(q)) for q in spec.queues]
    return doc


def _placed(
    entry: Mapping[str, Any], *, leaf: str | None = None, leaves: list[str] | None = None
) -> dict[str, Any]:
    out = {k: copy.deepcopy(v) for k, v in entry.items() if k not in ("leaf", "leaves")}
    if leaf is not None:
        out["leaf"] = leaf
    if leaves is not None:
        out["leaves"] = leaves
    return out


def _planned_pool(node: NodePlan, leaves: list[str]) -> dict[str, Any]:
    pool: dict[str, Any] = {
        "name": node.pool,
        "count": node.count,
        "gpu_model": node.gpu_model,
        "gpus": node.gpus,
        "cpu_cores": _plain(node.cpu_cores),
        "memory_gib": _plain(node.memory_gib),
    }
    if node.nvlink_domain and node.nvlink_domain != node.gpus:
        pool["nvlink_domain"] = node.nvlink_domain
    pool["labels"] = {"nic_gbps": node.nic_gbps, "nics": node.nics}
    pool["leaves"] = leaves
    return pool


def _plain(x: float) -> int | float:
    return int(x) if float(x).is_integer() else x


def render(doc: Mapping[str, Any], *, header: str) -> str:
    """YAML for people: keys in plan order, short lists of names on one line."""
    body = yaml.safe_dump(dict(doc), sort_keys=False, default_flow_style=None, width=100)
    lines = "".join(f"# {line}\n" if line else "#\n" for line in header.splitlines())
    return lines + body
