"""What the agent needs from a GPU backend, and the sample every backend produces.

A ``GpuSample`` field is named after the dcgm-exporter metric it becomes (``gpu_temp`` →
``DCGM_FI_DEV_GPU_TEMP``), so the controller can publish NVIDIA's names and labels unchanged and
existing Grafana dashboards work. A field a backend cannot read is ``None`` and is left out of
the payload, as dcgm-exporter leaves out a field the device does not support: never a made-up
zero. The sample holds every counter of dcgm-exporter's default set (``etc/default-counters.csv``:
NVML's fields, and the profiling ``DCGM_FI_PROF_*`` ones that only DCGM measures), plus the
few of its optional ones the health checks and gpufleet's dashboard use.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, Protocol

from gpufleet.api.schemas import GpuInfo


class GpuUnavailable(RuntimeError):
    """The backend cannot start (no driver, no library): the message says what to do."""


# GpuSample field → dcgm-exporter metric name (etc/default-counters.csv and dcp-metrics).
DCGM_FIELDS: dict[str, str] = {
    "gpu_util": "DCGM_FI_DEV_GPU_UTIL",  # %
    "mem_copy_util": "DCGM_FI_DEV_MEM_COPY_UTIL",  # %
    "enc_util": "DCGM_FI_DEV_ENC_UTIL",  # %
    "dec_util": "DCGM_FI_DEV_DEC_UTIL",  # %
    "fb_used": "DCGM_FI_DEV_FB_USED",  # MiB
    "fb_free": "DCGM_FI_DEV_FB_FREE",  # MiB
    "fb_reserved": "DCGM_FI_DEV_FB_RESERVED",  # MiB (NVML's memory info v2)
    "gpu_temp": "DCGM_FI_DEV_GPU_TEMP",  # °C
    "memory_temp": "DCGM_FI_DEV_MEMORY_TEMP",  # °C (HBM parts)
    "power_usage": "DCGM_FI_DEV_POWER_USAGE",  # W
    "total_energy_consumption": "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",  # mJ since boot
    "sm_clock": "DCGM_FI_DEV_SM_CLOCK",  # MHz
    "mem_clock": "DCGM_FI_DEV_MEM_CLOCK",  # MHz
    "pcie_replay_counter": "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    "ecc_sbe_vol_total": "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
    "ecc_dbe_vol_total": "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
    "retired_sbe": "DCGM_FI_DEV_RETIRED_SBE",  # pages retired (pre-Ampere)
    "retired_dbe": "DCGM_FI_DEV_RETIRED_DBE",
    "retired_pending": "DCGM_FI_DEV_RETIRED_PENDING",
    "correctable_remapped_rows": "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",  # Ampere and later
    "uncorrectable_remapped_rows": "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    "row_remap_pending": "DCGM_FI_DEV_ROW_REMAP_PENDING",
    "row_remap_failure": "DCGM_FI_DEV_ROW_REMAP_FAILURE",
    "xid_errors": "DCGM_FI_DEV_XID_ERRORS",  # gauge: the last XID seen (0: none yet)
    # NVML bitmask; dcgm-exporter's current name (DCGM_FI_DEV_CLOCK_THROTTLE_REASONS is deprecated)
    "clock_throttle_reasons": "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
    "nvlink_bandwidth_total": "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",  # counter, bytes (tx + rx)
    "vgpu_license_status": "DCGM_FI_DEV_VGPU_LICENSE_STATUS",  # 1 licensed, 0 not
    "nvlink_tx_bytes": "DCGM_FI_PROF_NVLINK_TX_BYTES",  # bytes/s
    "nvlink_rx_bytes": "DCGM_FI_PROF_NVLINK_RX_BYTES",  # bytes/s
    # DCGM's profiling fields (DCP): ratios 0..1, rates in bytes/s; only DCGM measures them
    "gr_engine_active": "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "sm_active": "DCGM_FI_PROF_SM_ACTIVE",
    "sm_occupancy": "DCGM_FI_PROF_SM_OCCUPANCY",
    "pipe_tensor_active": "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "dram_active": "DCGM_FI_PROF_DRAM_ACTIVE",
    "pcie_tx_bytes": "DCGM_FI_PROF_PCIE_TX_BYTES",
    "pcie_rx_bytes": "DCGM_FI_PROF_PCIE_RX_BYTES",
}

# The GpuSample fields that come from DCGM's profiling module (DcgmProfiling), not from NVML.
PROF_FIELDS: tuple[str, ...] = (
    "gr_engine_active",
    "sm_active",
    "sm_occupancy",
    "pipe_tensor_active",
    "dram_active",
    "pcie_tx_bytes",
    "pcie_rx_bytes",
)

# NVML clock-event (throttle) reason bits, for backends that synthesize them.
THROTTLE_GPU_IDLE = 0x1
THROTTLE_SW_POWER_CAP = 0x4
THROTTLE_SW_THERMAL = 0x20
THROTTLE_HW_THERMAL = 0x40


# Encoder figures NVML gives (nvmlDeviceGetEncoderStats) that dcgm-exporter does not publish:
# gpufleet's own names, in the same values. A GPU without NVENC (an H100), or a MIG device,
# sends none of them.
ENCODER_FIELDS: dict[str, str] = {
    "enc_sessions": "gpufleet_gpu_encoder_sessions",
    "enc_fps": "gpufleet_gpu_encoder_fps",  # moving average over its sessions
    "enc_latency_us": "gpufleet_gpu_encoder_latency_microseconds",
}


@dataclass(frozen=True, slots=True)
class ProcessUse:
    """One process's use of a GPU's engines over the last sample period, in % (NVML's
    nvmlDeviceGetProcessUtilization); None for an engine the GPU does not have."""

    pid: int
    sm: float | None = None
    mem: float | None = None
    enc: float | None = None
    dec: float | None = None


@dataclass(frozen=True, slots=True)
class TaskUse:
    """A live task as the simulated backend sees it: its process group, its GPUs, the share of
    each it keeps busy, and whether it encodes video (it was given the ``video`` capability)."""

    pid: int
    gpus: tuple[int, ...]
    share: float
    video: bool = False


@dataclass(frozen=True, slots=True)
class GpuSample:
    index: int
    uuid: str
    model: str  # the catalog's name ("H100-SXM")
    pci_bus_id: str = ""
    name: str = ""  # NVML's device name ("NVIDIA H100 80GB HBM3"): dcgm-exporter's modelName
    gpu_util: float | None = None
    mem_copy_util: float | None = None
    enc_util: float | None = None
    dec_util: float | None = None
    fb_used: int | None = None
    fb_free: int | None = None
    fb_reserved: int | None = None
    gpu_temp: float | None = None
    memory_temp: float | None = None
    power_usage: float | None = None
    total_energy_consumption: int | None = None
    sm_clock: int | None = None
    mem_clock: int | None = None
    pcie_replay_counter: int | None = None
    ecc_sbe_vol_total: int | None = None
    ecc_dbe_vol_total: int | None = None
    retired_sbe: int | None = None
    retired_dbe: int | None = None
    retired_pending: int | None = None
    correctable_remapped_rows: int | None = None
    uncorrectable_remapped_rows: int | None = None
    row_remap_pending: int | None = None
    row_remap_failure: int | None = None
    xid_errors: tuple[int, ...] = ()  # XIDs seen since the previous sample, oldest first
    clock_throttle_reasons: int | None = None
    nvlink_bandwidth_total: int | None = None
    vgpu_license_status: int | None = None
    nvlink_tx_bytes: float | None = None
    nvlink_rx_bytes: float | None = None
    nvlink_up: int | None = None  # links up now (health compares with discovery)
    gr_engine_active: float | None = None
    sm_active: float | None = None
    sm_occupancy: float | None = None
    pipe_tensor_active: float | None = None
    dram_active: float | None = None
    pcie_tx_bytes: float | None = None
    pcie_rx_bytes: float | None = None
    enc_sessions: int | None = None
    enc_fps: float | None = None
    enc_latency_us: float | None = None
    processes: tuple[ProcessUse, ...] = ()  # each process's share, where the driver says
    # a MIG device's profile ("1g.18gb") and GPU instance: dcgm-exporter's GPU_I_* labels
    mig_profile: str = ""
    gpu_instance_id: int | None = None

    def dcgm(self, last_xid: int = 0) -> dict[str, float | int]:
        """The dcgm-exporter metrics of this sample (and the encoder's, under gpufleet's
        names); ``last_xid`` carries the gauge forward."""
        out: dict[str, float | int] = {}
        for f in fields(self):
            name = DCGM_FIELDS.get(f.name) or ENCODER_FIELDS.get(f.name)
            if name is None:
                continue
            value = getattr(self, f.name)
            if f.name == "xid_errors":
                value = value[-1] if value else last_xid
            if value is not None:
                out[name] = value
        return out

    def labels(self) -> dict[str, str]:
        """dcgm-exporter's labels (``modelName`` is NVML's name, as dcgm-exporter writes it); the
        controller adds ``Hostname``, ``hostname``, ``device`` and ``DCGM_FI_DRIVER_VERSION``."""
        out = {
            "gpu": str(self.index),
            "UUID": self.uuid,
            "modelName": self.name or self.model,
            "pci_bus_id": self.pci_bus_id,
        }
        if self.mig_profile:
            out["GPU_I_PROFILE"] = self.mig_profile
            if self.gpu_instance_id is not None:
                out["GPU_I_ID"] = str(self.gpu_instance_id)
        return out


@dataclass(frozen=True, slots=True)
class DeviceRef:
    """How a container runtime names one of the node's GPUs. A whole GPU: its NVML index
    (``parent``) or UUID; a MIG device: CDI's ``<parent>:<mig>`` or its ``MIG-…`` UUID."""

    index: int  # the node's GPU index (what the scheduler allots, what a task's gpus hold)
    uuid: str
    parent: int  # the physical GPU's NVML index (a whole GPU's own)
    mig: int | None = None  # the MIG device's index on its parent; None for a whole GPU


def engine_utils(
    model: str, enc: float | None, dec: float | None
) -> tuple[float | None, float | None]:
    """The encoder and decoder utilization a GPU reports, None for an engine its model does
    not have (an H100 has NVDEC but no NVENC: no ENC series, as no encoder can be busy). A
    model whose engines the catalog does not know keeps what the device said."""
    from gpufleet.model.engines import engines_of

    e = engines_of(model)
    return (None if e.nvenc == 0 else enc), (None if e.nvdec == 0 else dec)


def node_gpu_model(gpus: Sequence[GpuInfo]) -> str:
    """The one model a node registers with (the scheduler sees a node as N GPUs of one model).
    Whole GPUs only: the most common model, as ever. With MIG devices: the kind with the least
    memory, so a job asking for a model gets at least that on any of the node's devices, and a
    job asking for a whole GPU model ("H200") never lands on a slice ("H200-1g.18gb"); a node
    that mixes kinds offers all its devices as its smallest (the agent says so at start)."""
    if not gpus:
        return ""
    if not any(g.mig_profile for g in gpus):
        return Counter(g.model for g in gpus).most_common(1)[0][0]
    return min(gpus, key=lambda g: (g.memory_mib, g.model)).model


def mixed_kinds_warning(gpus: Sequence[GpuInfo]) -> str | None:
    """What the agent says at start when MIG leaves its GPUs of several kinds (None: one)."""
    kinds = sorted({g.model for g in gpus})
    if len(kinds) <= 1 or not any(g.mig_profile for g in gpus):
        return None
    return (
        f"this node's GPUs are of {len(kinds)} kinds ({', '.join(kinds)}): the scheduler sees "
        f"one per node, so all {len(gpus)} are offered as {node_gpu_model(gpus)}, the smallest"
    )


class GpuBackend(Protocol):
    """NVML on a real server, ``SimulatedGpus`` elsewhere; the agent cannot tell them apart."""

    def discover(self) -> list[GpuInfo]: ...

    def driver_version(self) -> str: ...

    def cuda_version(self) -> str: ...

    def sample(self, now: float) -> list[GpuSample]:
        """One sample per GPU still reachable; a GPU that fell off the bus is absent."""
        ...

    def visible_devices(self, indices: Sequence[int]) -> str:
        """The ``CUDA_VISIBLE_DEVICES`` value that shows a task these GPUs and no others."""
        ...

    def set_load(self, load: Mapping[int, float], now: float, uses: Sequence[TaskUse] = ()) -> None:
        """GPU index → allocated fraction (1.0 = a whole GPU), and the live tasks (their
        processes and engines). Real GPUs ignore both."""
        ...

    def frozen(self, now: float) -> bool:
        """True when the whole node should look hung (a simulated fault). Real GPUs: False."""
        ...

    def close(self) -> None: ...


def metrics_payload(
    samples: Sequence[GpuSample],
    last_xid: Mapping[int, int],
    host: Mapping[str, Any],
    job_of: Callable[[int], str | None] | None = None,
) -> dict[str, Any]:
    """The ``Heartbeat.metrics`` body: per GPU its labels, dcgm values, the raw XIDs and, where
    the driver gives each process's share and ``job_of`` names the job a pid belongs to, each
    job's use of the GPU's engines."""
    gpus = []
    for s in samples:
        g: dict[str, Any] = {
            "labels": s.labels(),
            "values": s.dcgm(last_xid.get(s.index, 0)),
            "xids": list(s.xid_errors),
        }
        jobs = job_engine_use(s.processes, job_of) if job_of is not None else []
        if jobs:
            g["jobs"] = jobs
        gpus.append(g)
    return {"schema": 1, "gpus": gpus, "host": dict(host)}


ENGINES = ("sm", "memory", "encoder", "decoder")  # ProcessUse's sm, mem, enc, dec


def job_engine_use(
    procs: Sequence[ProcessUse], job_of: Callable[[int], str | None]
) -> list[dict[str, Any]]:
    """Each job's share of one GPU's engines: its processes' shares added up (a job's ranks
    and their children may share the GPU), at most 100 %; processes of no job are left out."""
    per: dict[str, dict[str, float]] = {}
    for p in procs:
        job = job_of(p.pid)
        if job is None:
            continue
        use = per.setdefault(job, {})
        for engine, v in zip(ENGINES, (p.sm, p.mem, p.enc, p.dec), strict=True):
            if v is not None:
                use[engine] = min(100.0, use.get(engine, 0.0) + v)
    return [{"job": job, "util": use} for job, use in sorted(per.items())]
