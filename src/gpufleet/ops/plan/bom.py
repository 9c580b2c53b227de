"""The bill of materials: every part the plan counts, one line each, with how it was counted."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpufleet.ops.plan import assumptions as A
from gpufleet.ops.plan.fabric import FabricPlan
from gpufleet.ops.plan.node import NodePlan
from gpufleet.ops.plan.power import FacilityPlan
from gpufleet.ops.plan.storage import StoragePlan


@dataclass(frozen=True, slots=True)
class BomLine:
    category: str
    item: str
    quantity: float
    unit: str
    note: str = ""


def bill_of_materials(
    nodes: Sequence[NodePlan],
    fabric: FabricPlan,
    storage: StoragePlan,
    facility: FacilityPlan,
) -> tuple[BomLine, ...]:
    out: list[BomLine] = []
    for n in nodes:
        out.extend(_node_lines(n, storage.cache_drive_tb))
    out.extend(_fabric_lines(fabric))
    out.append(
        BomLine(
            "storage",
            "shared filesystem capacity",
            round(storage.provisioned_tb, 2),
            "TB",
            f"{storage.required_tb:.2f} TB needed + {storage.capacity_headroom:.0%} free",
        )
    )
    out.append(
        BomLine(
            "storage",
            "shared filesystem write bandwidth",
            round(storage.write_gbs, 2),
            "GB/s",
            f"one {storage.checkpoint_tb:.2f} TB checkpoint in {storage.write_window_s:g} s",
        )
    )
    for r in facility.racks:
        out.append(
            BomLine(
                "facility",
                f"{r.pool} racks ({r.cooling}-cooled)",
                r.racks,
                "racks",
                f"{r.nodes_per_rack} nodes per rack ({r.limited_by}), {r.rack_kw:.1f} kW each",
            )
        )
    out.append(BomLine("facility", "compute power", round(facility.compute_kw, 1), "kW"))
    out.append(
        BomLine(
            "facility",
            "network power",
            round(facility.network_kw, 1),
            "kW",
            f"{fabric.switches} switches",
        )
    )
    out.append(BomLine("facility", "total IT power", round(facility.total_kw, 1), "kW"))
    return tuple(line for line in out if line.quantity)


def _node_lines(n: NodePlan, drive_tb: float) -> list[BomLine]:
    what = f"{n.gpus}× {n.gpu_model}" if n.gpus else "CPU-only"
    memory_note = f"{n.dimms} × {n.dimm_gb} GB DDR5 RDIMM" if n.memory_planned else ""
    return [
        BomLine(
            "compute",
            f"{n.pool} node: {what}, {n.sockets}× {n.cpu}, {n.memory_gib:g} GiB",
            n.count,
            "nodes",
            f"{n.power.node_w / 1000:.2f} kW, {n.rack_units}U",
        ),
        BomLine("compute", n.gpu_model or "GPU", n.count * n.gpus, "GPUs"),
        BomLine("compute", n.cpu, n.count * n.sockets, "CPUs", f"{n.cpu_cores:g} cores per node"),
        BomLine("compute", "host memory", n.count * n.memory_gib, "GiB", memory_note or "as given"),
        BomLine(
            "compute",
            f"{n.nic_gbps} Gb/s compute NIC",
            n.count * n.nics,
            "NICs",
            f"{n.nics} per node",
        ),
        BomLine(
            "compute",
            f"{n.frontend_nic_gbps} Gb/s frontend/storage Ethernet NIC",
            n.count * n.frontend_nics,
            "NICs",
        ),
        BomLine(
            "compute",
            f"{drive_tb:g} TB NVMe U.2 (local cache)",
            n.count * n.cache_drives,
            "drives",
            f"{n.cache_drives} per node",
        ),
        BomLine(
            "compute",
            f"{A.BOOT_DRIVE_GB} GB NVMe (boot, mirrored)",
            n.count * n.boot_drives,
            "drives",
        ),
    ]


def _fabric_lines(f: FabricPlan) -> list[BomLine]:
    switch = f"{f.radix} × {f.link_gbps} Gb/s switch"
    dac_note = f"{f.dac_cables} DAC, the rest optical" if f.dac_cables else "optical"
    return [
        BomLine("network", f"leaf {switch}", f.leaves, "switches", f"{f.leaf_uplinks} up each"),
        BomLine("network", f"spine {switch}", f.spines, "switches"),
        BomLine("network", f"super-spine {switch}", f.super_spines, "switches"),
        BomLine("network", "cable node–leaf", f.cables_node_leaf, "cables", dac_note),
        BomLine("network", "cable leaf–spine", f.cables_leaf_spine, "cables", "optical"),
        BomLine("network", "cable spine–super-spine", f.cables_spine_super, "cables", "optical"),
        BomLine(
            "network",
            f"{f.link_gbps} Gb/s transceiver",
            f.optics,
            "optics",
            "2 per optical cable",
        ),
    ]
