"""One node of each pool: host memory, CPU cores, PCIe lanes and slots, NICs, power.

Rules (each broken rule is a warning with its reason):

* host memory ≥ the node's total GPU memory (``sources.HOST_MEMORY``: "确保与GPU显存总量匹配"),
  so that pinned staging buffers, checkpoint copies and the page cache never starve the GPUs;
  a planned node gets the smallest balanced DIMM layout (one DIMM per channel, one size) that
  meets it;
* CPU cores ≥ GPUs × cores per GPU (``assumptions.CORES_PER_GPU``: 8 for training, 4 for
  inference);
* training on a rail-optimized fabric wants one ≥ 200 Gb/s compute NIC per GPU;
* PCIe lanes: 16 per GPU and, per NIC, the narrowest of x4/x8/x16/x32 whose Gen5 bandwidth
  (≈ 3.94 GB/s per lane per direction) carries its line rate (400 Gb/s = 50 GB/s → x16,
  ≈ 63 GB/s), 4 per NVMe drive; on an SXM/OAM baseboard a PCIe switch per two GPUs and their NICs
  takes one x16 host uplink instead; the sum must fit the platform's lanes (2 × 80 on Sapphire
  Rapids, 160 on a dual EPYC Genoa);
* power = (GPU TDP × GPUs + CPU TDP × sockets + 25 W per NIC + 20 W per NVMe drive + 10 W per
  DIMM) × the overhead factor (1.5: fans, NVSwitches, VRM and PSU losses).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpufleet.ops.plan import assumptions as A
from gpufleet.ops.plan.findings import PlanWarning
from gpufleet.ops.plan.intent import NodeGroup, PlanSpec
from gpufleet.ops.plan.sources import HOST_MEMORY


@dataclass(frozen=True, slots=True)
class PcieBudget:
    switched: bool  # GPUs and rail NICs behind PCIe switches (SXM/OAM baseboards)
    gpu_lanes: int  # host lanes for the GPUs (and, when switched, their rail NICs)
    nic_lanes: int  # host lanes for NICs not behind a switch
    nvme_lanes: int
    needed: int
    available: int
    add_in_slots: int  # PCIe cards: GPUs of PCIe form factor, every NIC
    lanes_per_nic: int
    nic_line_gbs: float  # a compute NIC's line rate in GB/s
    nic_link_gbs: float  # what its PCIe link carries per direction
    host_gbs_per_gpu: float  # host bandwidth per GPU when all GPUs copy at once


@dataclass(frozen=True, slots=True)
class NodePower:
    gpus_w: float
    cpus_w: float
    nics_w: float
    drives_w: float
    memory_w: float
    parts_w: float
    overhead_factor: float
    node_w: float


@dataclass(frozen=True, slots=True)
class NodePlan:
    pool: str
    count: int
    gpu_model: str  # "" for CPU-only nodes
    gpus: int
    form_factor: str
    gpu_tdp_w: int
    gpu_memory_gib: float  # all GPUs of the node together
    nvlink_domain: int  # GPUs per NVLink domain
    memory_gib: float
    memory_planned: bool
    dimms: int
    dimm_gb: int
    platform: str
    cpu: str
    sockets: int
    cpu_cores: float
    cores_needed: int
    nics: int
    nic_gbps: int
    frontend_nics: int
    frontend_nic_gbps: int
    cache_drives: int
    boot_drives: int
    rack_units: int
    pcie: PcieBudget
    power: NodePower
    warnings: tuple[PlanWarning, ...]


def plan_nodes(spec: PlanSpec, cache_drives: int) -> tuple[NodePlan, ...]:
    return tuple(plan_node(g, spec, cache_drives) for g in spec.groups)


def nic_lanes(gbps: int) -> int:
    """The narrowest PCIe Gen5 width that carries ``gbps`` in one direction."""
    for width in A.NIC_LANE_WIDTHS:
        if width * A.PCIE_GEN5_GBS_PER_LANE * 8 >= gbps:
            return width
    return A.NIC_LANE_WIDTHS[-1]


def dimm_layout(required_gib: float, channels: int) -> tuple[int, int]:
    """(DIMMs, GB each): the smallest one-size layout ≥ ``required_gib``, 1 then 2 per channel."""
    for per_channel in (1, 2):
        for size in A.DIMM_SIZES_GB:
            if channels * per_channel * size >= required_gib:
                return channels * per_channel, size
    return 2 * channels, A.DIMM_SIZES_GB[-1]


def plan_node(group: NodeGroup, spec: PlanSpec, cache_drives: int) -> NodePlan:
    opts = spec.node
    platform = opts.platform
    gpu = group.gpu
    gpus = group.gpus if gpu else 0
    form = gpu.form_factor if gpu else ""
    gpu_memory = gpus * gpu.memory_gib if gpu else 0.0
    # memory: the rule sizes a planned node; a given one is checked against it
    given_memory = group.memory_gib if group.memory_gib is not None else opts.memory_gib
    dimms, dimm_gb = dimm_layout(given_memory or gpu_memory, platform.memory_channels)
    memory = float(dimms * dimm_gb) if given_memory is None else given_memory
    given_cores = group.cpu_cores if group.cpu_cores is not None else opts.cpu_cores
    cores = float(platform.cores) if given_cores is None else given_cores
    nics = _compute_nics(group, spec) if gpus else 0
    drives = cache_drives if gpus else 0
    pcie = _pcie(group, spec, nics, drives)
    warnings = [
        *_host_warnings(group, spec, memory, cores),
        *_nic_warnings(group.name, spec, gpus, nics),
        *_io_warnings(group.name, spec, drives, pcie),
    ]
    return NodePlan(
        pool=group.name,
        count=group.count,
        gpu_model=gpu.name if gpu else "",
        gpus=gpus,
        form_factor=form,
        gpu_tdp_w=gpu.tdp_w if gpu else 0,
        gpu_memory_gib=gpu_memory,
        nvlink_domain=_nvlink_domain(group),
        memory_gib=memory,
        memory_planned=given_memory is None,
        dimms=dimms,
        dimm_gb=dimm_gb,
        platform=platform.name,
        cpu=platform.cpu,
        sockets=platform.sockets,
        cpu_cores=cores,
        cores_needed=gpus * opts.cores_per_gpu,
        nics=nics,
        nic_gbps=opts.nic_gbps,
        frontend_nics=opts.frontend_nics,
        frontend_nic_gbps=opts.frontend_nic_gbps,
        cache_drives=drives,
        boot_drives=A.BOOT_DRIVES,
        rack_units=opts.rack_units or A.NODE_RACK_UNITS.get(form, 2),
        pcie=pcie,
        power=_power(gpus, gpu.tdp_w if gpu else 0, spec, nics, drives, dimms),
        warnings=tuple(warnings),
    )


def _host_warnings(
    group: NodeGroup, spec: PlanSpec, memory: float, cores: float
) -> list[PlanWarning]:
    """Host memory against the GPUs' and CPU cores against the GPUs' need."""
    opts, gpu = spec.node, group.gpu
    gpus = group.gpus if gpu else 0
    gpu_memory = gpus * gpu.memory_gib if gpu else 0.0
    out: list[PlanWarning] = []
    if gpus and memory < gpu_memory:
        out.append(
            PlanWarning(
                "host-memory",
                group.name,
                f"host memory {memory:g} GiB is below the GPUs' {gpu_memory:g} GiB"
                f" ({gpus} × {gpu.memory_gib if gpu else 0:g} GiB)",
                "host memory should be at least the total GPU memory: pinned buffers, checkpoint "
                f"staging and data loading need a host copy of what the GPUs hold; {HOST_MEMORY}",
            )
        )
    if gpus and cores < gpus * opts.cores_per_gpu:
        out.append(
            PlanWarning(
                "cpu-cores",
                group.name,
                f"{cores:g} CPU cores for {gpus} GPUs is {cores / gpus:.1f} per GPU,"
                f" below {opts.cores_per_gpu}",
                f"{spec.workload} wants ≥ {opts.cores_per_gpu} physical cores per GPU (data"
                " loading, one rank process per GPU); starved loaders leave GPUs idle",
            )
        )
    return out


def _nic_warnings(pool: str, spec: PlanSpec, gpus: int, nics: int) -> list[PlanWarning]:
    """Training on a rail-optimized fabric: a fast enough compute NIC per GPU."""
    if not gpus or spec.workload != "training":
        return []
    out: list[PlanWarning] = []
    if nics < gpus:
        out.append(
            PlanWarning(
                "nic-per-gpu",
                pool,
                f"{nics} compute NICs for {gpus} GPUs",
                "rail-optimized training wants one compute NIC per GPU, so that each GPU's "
                "all-reduce traffic has its own rail and GPUDirect RDMA path",
            )
        )
    if spec.node.nic_gbps < A.RAIL_NIC_MIN_GBPS:
        out.append(
            PlanWarning(
                "nic-speed",
                pool,
                f"compute NICs of {spec.node.nic_gbps} Gb/s",
                f"training wants ≥ {A.RAIL_NIC_MIN_GBPS} Gb/s per GPU for gradient all-reduce",
            )
        )
    return out


def _io_warnings(pool: str, spec: PlanSpec, drives: int, pcie: PcieBudget) -> list[PlanWarning]:
    """The cache drives against the bays, and the devices against the PCIe lanes."""
    out: list[PlanWarning] = []
    if drives > spec.storage.nvme_bays:
        out.append(
            PlanWarning(
                "nvme-bays",
                pool,
                f"the local cache needs {drives} NVMe drives, the node has"
                f" {spec.storage.nvme_bays} bays",
                "the node's dataset shard and its headroom should fit the local NVMe cache; use "
                "larger drives (storage.nvme_drive_tb) or more nodes",
            )
        )
    if pcie.needed > pcie.available:
        out.append(
            PlanWarning(
                "pcie-lanes",
                pool,
                f"GPUs, NICs and drives need {pcie.needed} PCIe Gen5 lanes, a dual"
                f" {spec.node.platform.cpu} gives {pcie.available}",
                "every GPU and 400 Gb/s NIC needs its own x16 link to run at full speed; use a "
                "board with PCIe switches (node.pcie_switches), fewer devices, or another "
                "platform",
            )
        )
    if pcie.nic_line_gbs > pcie.nic_link_gbs:
        out.append(
            PlanWarning(
                "nic-pcie",
                pool,
                f"a {spec.node.nic_gbps} Gb/s NIC ({pcie.nic_line_gbs:.1f} GB/s) on a Gen5"
                f" x{pcie.lanes_per_nic} link ({pcie.nic_link_gbs:.1f} GB/s)",
                "the NIC's PCIe link must carry its line rate",
            )
        )
    return out


def _compute_nics(group: NodeGroup, spec: PlanSpec) -> int:
    if spec.node.nics is not None:
        return spec.node.nics
    if spec.workload == "training":
        return group.gpus  # one rail per GPU
    return max(1, math.ceil(group.gpus / A.GPUS_PER_INFERENCE_NIC))


def _nvlink_domain(group: NodeGroup) -> int:
    """GPUs per NVLink domain: the whole node on SXM/OAM, bridged pairs on PCIe, else 1."""
    gpu = group.gpu
    if gpu is None or group.gpus == 0:
        return 0
    if gpu.nvlink_gbs == 0:
        return 1
    if gpu.form_factor == "PCIe":
        return min(2, group.gpus)
    return group.gpus


def _pcie(group: NodeGroup, spec: PlanSpec, nics: int, drives: int) -> PcieBudget:
    opts = spec.node
    gpu = group.gpu
    gpus = group.gpus if gpu else 0
    switched = (
        opts.pcie_switches
        if opts.pcie_switches is not None
        else bool(gpu and gpu.form_factor in ("SXM", "OAM"))
    ) and gpus > 0
    per_nic = nic_lanes(opts.nic_gbps)
    frontend = opts.frontend_nics * nic_lanes(opts.frontend_nic_gbps)
    if switched:
        gpu_lanes = A.GPU_PCIE_LANES * math.ceil(gpus / A.GPUS_PER_PCIE_SWITCH)
        direct_nics = max(0, nics - gpus)  # one rail NIC per GPU sits under each switch
    else:
        gpu_lanes = A.GPU_PCIE_LANES * gpus
        direct_nics = nics
    nic_lanes_total = direct_nics * per_nic + frontend
    nvme = (drives + A.BOOT_DRIVES) * A.NVME_PCIE_LANES
    x16 = A.GPU_PCIE_LANES * A.PCIE_GEN5_GBS_PER_LANE
    return PcieBudget(
        switched=switched,
        gpu_lanes=gpu_lanes,
        nic_lanes=nic_lanes_total,
        nvme_lanes=nvme,
        needed=gpu_lanes + nic_lanes_total + nvme,
        available=opts.platform.pcie_gen5_lanes,
        add_in_slots=(gpus if gpu and gpu.form_factor == "PCIe" else 0) + nics + opts.frontend_nics,
        lanes_per_nic=per_nic,
        nic_line_gbs=opts.nic_gbps / 8,
        nic_link_gbs=per_nic * A.PCIE_GEN5_GBS_PER_LANE,
        host_gbs_per_gpu=x16 / A.GPUS_PER_PCIE_SWITCH if switched else x16,
    )


def _power(gpus: int, tdp_w: int, spec: PlanSpec, nics: int, drives: int, dimms: int) -> NodePower:
    opts = spec.node
    gpus_w = float(gpus * tdp_w)
    cpus_w = float(opts.platform.sockets * opts.platform.tdp_w)
    nics_w = float((nics + opts.frontend_nics) * A.NIC_W)
    drives_w = float((drives + A.BOOT_DRIVES) * A.NVME_W)
    memory_w = float(dimms * A.DIMM_W)
    parts = gpus_w + cpus_w + nics_w + drives_w + memory_w
    factor = spec.power.overhead_factor
    return NodePower(gpus_w, cpus_w, nics_w, drives_w, memory_w, parts, factor, parts * factor)
