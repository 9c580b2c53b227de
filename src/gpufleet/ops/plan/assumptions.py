"""Every constant the planner uses that is not in the GPU catalog, with where it comes from.

Change a figure here and every plan, table and test that depends on it follows. Figures that a
site is likely to differ on are options of the plan spec instead (rack budget, switch radix,
overhead factor, …); these are the ones a datasheet fixes.
"""

from __future__ import annotations

from dataclasses import dataclass

# --- PCIe -------------------------------------------------------------------------------------
# Gen5: 32 GT/s per lane, 128b/130b encoding → 32 × 128/130 / 8 ≈ 3.94 GB/s per lane per
# direction, so an x16 link is ≈ 63 GB/s (the "64 GB/s" usually quoted) each way.
PCIE_GEN5_GBS_PER_LANE = 32 * 128 / 130 / 8
GPU_PCIE_LANES = 16  # every data-centre GPU (PCIe card or SXM/OAM module) has an x16 host link
NVME_PCIE_LANES = 4  # U.2 / E3.S and M.2 NVMe drives are x4
NIC_LANE_WIDTHS = (4, 8, 16, 32)  # x32 = two x16 links (800 Gb/s NICs on Gen5 hosts)
# On HGX/OAM baseboards each pair of GPUs and its two rail NICs sit behind one PCIe switch with
# one x16 uplink to the host (GPUDirect RDMA stays under the switch), so the host sees one x16
# per two GPUs instead of 16 lanes per GPU and per NIC.
GPUS_PER_PCIE_SWITCH = 2


@dataclass(frozen=True, slots=True)
class CpuPlatform:
    """A dual-socket host platform: what it offers to GPUs, NICs and drives."""

    name: str
    cpu: str
    sockets: int
    cores_per_socket: int
    tdp_w: int  # per socket
    pcie_gen5_lanes: int  # usable by devices, whole system
    memory_channels: int  # whole system, one DIMM per channel
    note: str

    @property
    def cores(self) -> int:
        return self.sockets * self.cores_per_socket


# sources.NODE_CPUS: dual Xeon Platinum 8480+ or EPYC 9654.
PLATFORMS: dict[str, CpuPlatform] = {
    "sapphire-rapids": CpuPlatform(
        name="sapphire-rapids",
        cpu="Intel Xeon Platinum 8480+",
        sockets=2,
        cores_per_socket=56,
        tdp_w=350,
        pcie_gen5_lanes=2 * 80,
        memory_channels=2 * 8,
        note="80 PCIe Gen5 lanes and 8 DDR5 channels per socket; sockets joined by UPI",
    ),
    "genoa": CpuPlatform(
        name="genoa",
        cpu="AMD EPYC 9654",
        sockets=2,
        cores_per_socket=96,
        tdp_w=360,
        # 128 lanes per socket, but in 2P some of them become the xGMI links between the sockets:
        # 2P systems give 160 (three xGMI links, usual for GPU servers) or 128 (four).
        pcie_gen5_lanes=160,
        memory_channels=2 * 12,
        note="128 PCIe Gen5 lanes per socket, 160 usable in 2P with 3 xGMI links; 12 channels",
    ),
}
DEFAULT_PLATFORM = "sapphire-rapids"

# --- memory -----------------------------------------------------------------------------------
# DDR5 RDIMM sizes on sale; host memory is one DIMM per channel of one size (balanced channels).
DIMM_SIZES_GB = (16, 24, 32, 48, 64, 96, 128, 256)

# --- power per component (W), at full load -------------------------------------------------------
NIC_W = 25  # a ConnectX-7-class NIC with its transceiver
NVME_W = 20  # a U.2 NVMe drive writing
DIMM_W = 10  # a DDR5 RDIMM under load
# Fans, NVSwitch baseboard, VRM and PSU losses: nameplate ≈ 1.5 × the parts. With the figures
# above this gives 10.2 kW for 8 × H100 SXM (DGX H100's maximum is 10.2 kW) and 6.6 kW for
# 8 × A100 (DGX A100: 6.5 kW); racks are provisioned for the maximum, not the average.
NODE_OVERHEAD_FACTOR = 1.5
SWITCH_W = 1700  # a 64 × 400 Gb/s switch with its optics, at full load (set yours per vendor)

# --- node height in rack units -------------------------------------------------------------------
NODE_RACK_UNITS = {"SXM": 8, "OAM": 8, "PCIe": 4}  # HGX/DGX-class 8U; 8-card PCIe servers 4U

# --- local drives ------------------------------------------------------------------------------
# sources.NODE_DISKS: system disks 2 × 480 GB NVMe, cache 4 × 3.84 TB NVMe U.2.
BOOT_DRIVES = 2
BOOT_DRIVE_GB = 480
CACHE_DRIVE_TB = 3.84
MIN_CACHE_DRIVES = 4
CACHE_DRIVE_BAYS = 8  # U.2 bays on an HGX-class node (DGX H100: 8 × 3.84 TB)

# --- rules of thumb ------------------------------------------------------------------------------
# Physical cores per GPU: a training rank feeds its GPU with ~6–12 data-loader workers plus its
# own process; inference needs fewer (tokenization, batching, the server).
CORES_PER_GPU = {"training": 8, "inference": 4}
RAIL_NIC_MIN_GBPS = 200  # rail-optimized training wants one ≥ 200 Gb/s NIC per GPU
GPUS_PER_INFERENCE_NIC = 4  # inference: one compute NIC per four GPUs
# Optimizer state per parameter kept in a checkpoint, in bytes (weights counted separately):
OPTIMIZER_BYTES = {
    "adam": 12,  # mixed precision: fp32 master weights + fp32 first and second moments
    "adam-fp32": 8,  # fp32 training: the two moments (the weights are the 4-byte parameters)
    "sgd-momentum": 4,  # one fp32 momentum
    "sgd": 0,
    "none": 0,  # inference: weights only
}
