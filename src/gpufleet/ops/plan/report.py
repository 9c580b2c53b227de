"""A plan for scripts (one JSON-ready dict) and for people (plan.md, bom.csv, worked figures)."""

from __future__ import annotations

import csv
import io
from dataclasses import asdict, is_dataclass
from typing import Any

from gpufleet.ops.plan.build import Plan
from gpufleet.ops.plan.fabric import FabricPlan
from gpufleet.ops.plan.node import NodePlan
from gpufleet.ops.plan.power import RackPlan

# -- the figures, with the arithmetic that gave them ------------------------------------------


def worked(plan: Plan) -> list[tuple[str, str]]:
    """(topic, the formula with this plan's numbers), for every headline figure."""
    out: list[tuple[str, str]] = []
    for n, r in zip(plan.nodes, plan.facility.racks, strict=True):
        if n.gpus:
            out.extend(_gpu_node_worked(n))
        out.extend(_node_racks_worked(plan, n, r))
    out.extend(_fabric_worked(plan.fabric))
    out.extend(_storage_worked(plan))
    return out


def _gpu_node_worked(n: NodePlan) -> list[tuple[str, str]]:
    """A GPU node's host memory, CPU cores and PCIe lanes."""
    p = n.pcie
    out: list[tuple[str, str]] = []
    per_gpu = n.gpu_memory_gib / n.gpus
    memory = f"≥ {n.gpus} × {per_gpu:g} GiB = {n.gpu_memory_gib:g} GiB → "
    memory += (
        f"{n.dimms} × {n.dimm_gb} GB = {n.memory_gib:g} GiB"
        if n.memory_planned
        else f"{n.memory_gib:g} GiB given"
    )
    out.append((f"{n.pool}: host memory", memory))
    out.append(
        (
            f"{n.pool}: CPU cores",
            f"≥ {n.gpus} GPUs × {n.cores_needed // n.gpus} = {n.cores_needed};"
            f" {n.cpu_cores:g} ({n.sockets}× {n.cpu})",
        )
    )
    gpu_part = (
        f"{p.gpu_lanes} (GPUs and rail NICs behind {p.gpu_lanes // 16} PCIe switches)"
        if p.switched
        else f"{p.gpu_lanes} (GPUs, x16 each)"
    )
    out.append(
        (
            f"{n.pool}: PCIe Gen5 lanes",
            f"{gpu_part} + {p.nic_lanes} (NICs) + {p.nvme_lanes} (NVMe, x4 each) ="
            f" {p.needed} of {p.available}; NIC {p.nic_line_gbs:g} GB/s on"
            f" x{p.lanes_per_nic} ≈ {p.nic_link_gbs:.0f} GB/s; {p.add_in_slots} add-in"
            " cards",
        )
    )
    return out


def _node_racks_worked(plan: Plan, n: NodePlan, r: RackPlan) -> list[tuple[str, str]]:
    """A node's power, and the racks its pool fills."""
    w = n.power
    out: list[tuple[str, str]] = []
    out.append(
        (
            f"{n.pool}: node power",
            f"({w.gpus_w:g} GPUs + {w.cpus_w:g} CPUs + {w.nics_w:g} NICs + {w.drives_w:g}"
            f" drives + {w.memory_w:g} DIMMs) W × {w.overhead_factor:g} = {w.node_w:,.1f} W",
        )
    )
    out.append(
        (
            f"{n.pool}: racks",
            f"{r.nodes_per_rack} nodes per rack (by {r.limited_by}: budget"
            f" {plan.spec.power.rack_kw:g} kW, {plan.spec.power.rack_units}U of"
            f" {n.rack_units}U nodes) → {r.racks} racks of {r.rack_kw:.1f} kW; {r.cooling}:"
            f" {r.cooling_reason}",
        )
    )
    return out


def _storage_worked(plan: Plan) -> list[tuple[str, str]]:
    """The checkpoints, the shared capacity, the write rate and the local cache."""
    out: list[tuple[str, str]] = []
    s = plan.storage
    if s.parameters:
        out.append(
            (
                "checkpoint",
                f"{_count(s.parameters)} params × ({s.weight_bytes_per_param:g} B weights +"
                f" {s.optimizer_bytes_per_param:g} B {s.optimizer}) = {s.checkpoint_tb:.3g} TB;"
                f" × {s.checkpoints_kept} kept = {s.checkpoints_tb:.3g} TB",
            )
        )
    out.append(
        (
            "shared capacity",
            f"{s.checkpoints_tb:.3g} TB checkpoints + {s.dataset_tb:g} TB dataset ="
            f" {s.required_tb:.4g} TB; × (1 + {s.capacity_headroom:g}) ="
            f" {s.provisioned_tb:.4g} TB provisioned",
        )
    )
    if s.write_gbs:
        out.append(
            (
                "checkpoint write",
                f"{s.checkpoint_tb:.3g} TB / ({s.checkpoint_write_share:g} ×"
                f" {s.checkpoint_interval_min:g} min = {s.write_window_s:g} s) ="
                f" {s.write_gbs:.3g} GB/s ({s.write_gbs_per_node * 1000:.3g} MB/s per node)",
            )
        )
    out.append(
        (
            "local NVMe cache",
            f"{s.dataset_tb:g} TB / {s.gpu_nodes} nodes × (1 + {s.cache_headroom:g})"
            f" = {s.cache_tb_per_node:.3g} TB → {s.cache_drives_per_node} × {s.cache_drive_tb:g}"
            f" TB per node",
        )
    )
    return out


def _fabric_worked(f: FabricPlan) -> list[tuple[str, str]]:
    up_total = f.leaves * f.leaf_uplinks
    out = [
        (
            "fabric: leaves",
            f"{f.endpoints} endpoints; a {f.radix}-port leaf at {f.oversubscription} has"
            f" {f.leaf_downlinks} down + {f.leaf_uplinks} up → {f.leaves} leaves in"
            f" {len(f.groups)} groups",
        ),
    ]
    if f.tiers >= 2:
        spines = (
            f"{f.leaves} × {f.leaf_uplinks} = {up_total} uplinks → {f.spines} spines"
            f" ({', '.join(str(s) for s in f.spines_per_pod)} per pod)"
        )
        if f.tiers == 3:
            spines += f"; {up_total} pod-spine uplinks / {f.radix} → {f.super_spines} super-spines"
        out.append(("fabric: spines", spines))
    out.append(
        (
            "fabric: cables and optics",
            f"{f.cables_node_leaf} node–leaf + {f.cables_leaf_spine} leaf–spine +"
            f" {f.cables_spine_super} spine–super-spine; {f.dac_cables} DAC;"
            f" optics 2 × {f.optical_cables} = {f.optics}",
        )
    )
    links = f.endpoints if f.tiers == 1 else min(f.endpoints, up_total)
    out.append(
        (
            "fabric: bisection",
            f"{links} × {f.link_gbps} Gb/s / 2 = {f.bisection_tbps:g} Tb/s; {f.max_hops} switch"
            f" hops; two tiers hold {f.radix} × {f.leaf_downlinks} ="
            f" {f.two_tier_max_endpoints} endpoints",
        )
    )
    return out


# -- JSON ------------------------------------------------------------------------------------


def to_dict(plan: Plan) -> dict[str, Any]:
    spec = plan.spec
    return {
        "name": spec.name,
        "source": spec.source,
        "workload": spec.workload,
        "input": "cluster" if spec.from_cluster else "intent",
        "summary": summary(plan),
        "nodes": [_plain(n) for n in plan.nodes],
        "fabric": _fabric_dict(plan.fabric, groups=True),
        "alternative_fabric": (
            _fabric_dict(plan.alternative, groups=False) if plan.alternative else None
        ),
        "storage": _plain(plan.storage)
        | {"cache_capacity_tb_per_node": plan.storage.cache_capacity_tb_per_node},
        "racks": [_plain(r) for r in plan.facility.racks],
        "bom": [_plain(b) for b in plan.bom],
        "warnings": [_plain(w) for w in plan.warnings],
        "worked": [{"topic": t, "formula": text} for t, text in worked(plan)],
        "cluster": plan.cluster,
        "topology_conf": plan.topology_conf,
    }


def summary(plan: Plan) -> dict[str, Any]:
    f, fac = plan.fabric, plan.facility
    return {
        "nodes": plan.node_count,
        "gpus": plan.gpus,
        "topology": f.topology,
        "tiers": f.tiers,
        "leaves": f.leaves,
        "spines": f.spines,
        "super_spines": f.super_spines,
        "cables": f.cables,
        "optics": f.optics,
        "bisection_tbps": f.bisection_tbps,
        "storage_tb": round(plan.storage.provisioned_tb, 3),
        "checkpoint_write_gbs": round(plan.storage.write_gbs, 3),
        "racks": fac.total_racks,
        "cooling": fac.cooling,
        "compute_kw": round(fac.compute_kw, 3),
        "network_kw": round(fac.network_kw, 3),
        "total_kw": round(fac.total_kw, 3),
        "warnings": len(plan.warnings),
    }


def _fabric_dict(f: FabricPlan, *, groups: bool) -> dict[str, Any]:
    out: dict[str, Any] = _plain(f)
    out.update(spines=f.spines, switches=f.switches, cables=f.cables)
    if not groups:
        out.pop("groups")
    return out


def _plain(obj: Any) -> Any:
    """Dataclasses as dicts, without their warnings (the plan lists them once, at the top)."""
    if is_dataclass(obj) and not isinstance(obj, type):
        d = asdict(obj)
        d.pop("warnings", None)
        return d
    return obj


# -- files for people ------------------------------------------------------------------------


def bom_csv(plan: Plan) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["category", "item", "quantity", "unit", "note"])
    for b in plan.bom:
        w.writerow([b.category, b.item, _number(b.quantity), b.unit, b.note])
    return buf.getvalue()


def markdown(plan: Plan) -> str:
    s = summary(plan)
    lines = [
        f"# Plan: {plan.spec.name}",
        "",
        f"From `{plan.spec.source}` ({'a cluster' if plan.spec.from_cluster else 'an intent'},"
        f" {plan.spec.workload}). {s['nodes']} nodes, {s['gpus']} GPUs; {s['topology']}"
        f" fabric, {s['tiers']} tier(s); {s['racks']} racks, {s['total_kw']:,.1f} kW,"
        f" {s['cooling']} cooling.",
        "",
        "## Warnings",
        "",
    ]
    if plan.warnings:
        lines += _md_table(
            ["where", "code", "what", "why"],
            [[w.where, w.code, w.message, w.reason] for w in plan.warnings],
        )
    else:
        lines.append("None.")
    lines += ["", "## Figures and how they were worked out", ""]
    lines += _md_table(["figure", "formula"], [[t, text] for t, text in worked(plan)])
    lines += ["", "## Fabric", ""]
    lines += _md_table(fabric_header(plan), fabric_rows(plan))
    lines += ["", "## Bill of materials", ""]
    lines += _md_table(
        ["category", "item", "quantity", "unit", "note"],
        [[b.category, b.item, _number(b.quantity), b.unit, b.note] for b in plan.bom],
    )
    lines += [
        "",
        "## Outputs",
        "",
        "`cluster.yaml` is the ClusterSpec for the scheduler (`gpufleet spec check cluster.yaml`);"
        " `topology.conf` is the same tree for Slurm.",
        "",
    ]
    return "\n".join(lines)


def fabric_header(plan: Plan) -> list[str]:
    other = [plan.alternative.topology] if plan.alternative else []
    return ["", f"{plan.fabric.topology} (planned)", *other]


def fabric_rows(plan: Plan) -> list[list[str]]:
    """(figure, planned fabric[, the other topology]) rows."""

    def row(f: FabricPlan) -> list[str]:
        return [
            str(f.endpoints),
            f.oversubscription,
            f"{f.leaf_downlinks} + {f.leaf_uplinks}",
            str(f.tiers),
            str(len(f.groups)),
            str(f.leaves),
            str(f.spines),
            str(f.super_spines),
            f"{f.ports_used} / {f.ports_available}",
            str(f.cables),
            str(f.dac_cables),
            str(f.optics),
            f"{f.bisection_tbps:g}",
            str(f.max_hops),
        ]

    names = [
        "endpoints",
        "oversubscription",
        "leaf down + up",
        "tiers",
        "leaf groups",
        "leaves",
        "spines",
        "super-spines",
        "ports used / available",
        "cables",
        "DAC cables",
        "optics",
        "bisection Tb/s",
        "max hops",
    ]
    columns = [names, row(plan.fabric)]
    if plan.alternative:
        columns.append(row(plan.alternative))
    return [list(r) for r in zip(*columns, strict=True)]


def _md_table(header: list[str], rows: list[list[Any]]) -> list[str]:
    def cell(x: Any) -> str:
        return str(x).replace("|", "\\|").replace("\n", " ")

    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(cell(x) for x in r) + " |" for r in rows]
    return out


def _count(x: float) -> str:
    """70B, 1.8T, 340M: parameter counts as people say them."""
    for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if x >= scale:
            return f"{x / scale:.4g}{suffix}"
    return f"{x:g}"


def _number(x: float) -> str:
    return f"{x:g}" if isinstance(x, float) and not x.is_integer() else str(int(x))
