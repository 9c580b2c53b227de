"""Simulated GPUs that the rest of the system cannot tell from real ones.

The load drives everything: utilization is the share of the GPU the running tasks hold,
power = idle + (TDP − idle) × utilization, the temperature relaxes toward ambient + a rise
proportional to power with a first-order time constant, and energy is power integrated. The
profiling ratios (DCGM's ``PROF_*``: graphics engine, SMs, tensor pipes, DRAM) are fixed shares
of the utilization, PCIe and NVLink traffic rates proportional to it (their byte counters are
the rates integrated), the HBM runs a little warmer than the die's rise. The GPUs report
NVML's device names (``NVML_NAMES``), so the controller's ``modelName`` is what a real node's
dcgm-exporter writes.
Time is passed in (``sample(now)``, ``set_load(load, now)``); nothing here reads a clock, so a
test steps an hour in a microsecond. Between two calls the load is constant, which makes the
exponential and the integral exact, not approximations.
"""

from __future__ import annotations

import logging
import math
import os
import re
import uuid as uuidlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from gpufleet.agent.faults import RECURRING, Fault, parse_fault
from gpufleet.agent.gpu import (
    THROTTLE_GPU_IDLE,
    THROTTLE_HW_THERMAL,
    THROTTLE_SW_THERMAL,
    GpuSample,
    ProcessUse,
    TaskUse,
    engine_utils,
)
from gpufleet.api.schemas import GpuInfo
from gpufleet.model.catalog import MIG_COMPUTE_SLICES, GpuModel, lookup, mig_parent
from gpufleet.model.engines import engines_of

log = logging.getLogger(__name__)

_UUID_NS = uuidlib.UUID("5f1e3c7a-9a4e-4f3b-8d7e-6c1b2a3d4e5f")  # fixed: UUIDs stable across runs
_CLOCKS_MHZ = {  # (max SM, memory) from the vendors' specifications; others get the default
    "B200": (1965, 3996),
    "H200": (1980, 3201),
    "H100-SXM": (1980, 2619),
    "H100-PCIe": (1755, 1593),
    "A100-80GB": (1410, 1593),
    "A100-40GB": (1410, 1215),
}
_DEFAULT_CLOCKS = (1700, 1500)
# catalog name → NVML's device name (what nvidia-smi and dcgm-exporter's modelName show)
NVML_NAMES: dict[str, str] = {
    "B200": "NVIDIA B200",
    "H200": "NVIDIA H200",
    "H100-SXM": "NVIDIA H100 80GB HBM3",
    "H100-PCIe": "NVIDIA H100 PCIe",
    "H800": "NVIDIA H800",
    "A100-40GB": "NVIDIA A100-SXM4-40GB",
    "A100-80GB": "NVIDIA A100-SXM4-80GB",
    "A800": "NVIDIA A800-SXM4-80GB",
    "L40S": "NVIDIA L40S",
    "L40": "NVIDIA L40",
    "RTX-6000-Ada": "NVIDIA RTX 6000 Ada Generation",
    "L4": "NVIDIA L4",
    "A16": "NVIDIA A16",
    "A10": "NVIDIA A10",
    "T4": "Tesla T4",
    "V100-16GB": "Tesla V100-SXM2-16GB",
    "V100-32GB": "Tesla V100-SXM2-32GB",
    "P100": "Tesla P100-PCIE-16GB",
    "RTX-A6000": "NVIDIA RTX A6000",
    "RTX-4090": "NVIDIA GeForce RTX 4090",
    "MI300X": "AMD Instinct MI300X",
}
# GDDR boards: NVML has no memory temperature for them (only HBM parts report one)
_GDDR = frozenset(
    {"L40S", "L40", "RTX-6000-Ada", "L4", "A16", "A10", "T4", "RTX-A6000", "RTX-4090"}
)
# shares of the utilization that DCGM's profiling fields show under a typical training load
_PROF_SHARES = {
    "gr_engine_active": 0.98,
    "sm_active": 0.85,
    "sm_occupancy": 0.40,
    "pipe_tensor_active": 0.45,
    "dram_active": 0.55,
}
_PCIE_RX_BPS = 4e9  # host → GPU at full load (input pipeline), bytes/s
_PCIE_TX_BPS = 1e9  # GPU → host (checkpoints, logs)
_PCIE_IDLE_BPS = 2e5  # the driver's own traffic
_HBM_EXTRA_RISE = 0.15  # the HBM's rise over ambient, relative to the die's
_DRIVER_ENV = "GPUFLEET_SIM_DRIVER_VERSION"
_CUDA_ENV = "GPUFLEET_SIM_CUDA_VERSION"
_IDLE_SM_MHZ = 345
_FB_RESERVED_MIB = 512  # what the driver holds on an idle GPU
# a task that encodes video (one NVENC session per task): its share of the encoder and of the
# decoder (its input) per unit of GPU share, and what NVML's encoder stats then say
_VIDEO_ENC = 35.0
_VIDEO_DEC = 20.0
_ENC_FPS = 60.0
_ENC_LATENCY_US = 4_000.0


@dataclass(frozen=True, slots=True)
class Thermal:
    ambient_c: float = 30.0
    full_power_rise_c: float = 45.0  # steady state at TDP: ambient + this
    tau_s: float = 30.0  # first-order time constant of die + heatsink
    idle_fraction: float = 0.1  # idle power as a share of TDP
    overheat_rise_c: float = 65.0  # extra rise while cooling has failed (fault "hot")
    slowdown_c: float = 87.0  # above this the clocks throttle


@dataclass
class _Gpu:
    index: int
    uuid: str
    temp_c: float
    energy_mj: float = 0.0
    nvlink_bytes: float = 0.0  # tx + rx since boot
    load: float = 0.0
    dbe: int = 0
    remapped_unc: int = 0
    pending_xids: list[int] = field(default_factory=list)
    offbus: bool = False
    hot: bool = False
    nvlink_down: bool = False


def nvlink_links(model: GpuModel) -> int:
    """NVLinks per GPU: 50 GB/s links through Hopper (12 on A100, 18 on H100), 100 on Blackwell."""
    if model.form_factor != "SXM" or model.nvlink_gbs <= 0:
        return 0
    return round(model.nvlink_gbs / (100 if model.nvlink_gbs >= 1800 else 50))


class SimulatedGpus:
    def __init__(
        self,
        model: GpuModel,
        count: int,
        node: str = "sim",
        *,
        start: float = 0.0,
        thermal: Thermal = Thermal(),
        driver_version: str = "550.54.15",
        cuda_version: str = "12.4",
    ) -> None:
        if count < 1:
            raise ValueError(f"a simulated node needs at least one GPU, not {count}")
        self.model = model
        self.node = node
        self.start = start
        self.thermal = thermal
        self._driver = driver_version
        self._cuda = cuda_version
        self._links = nvlink_links(model)
        self._t = start
        self._idle_w = thermal.idle_fraction * model.tdp_w
        idle_temp = self._steady_temp(self._idle_w, hot=False)
        # a MIG model ("H200-1g.18gb"): the node's devices are MIG devices, as NVML lists them
        self._parent = mig_parent(model.name)
        kind = "MIG-" if self._parent is not None else "GPU-"
        self._gpus = [
            _Gpu(i, kind + str(uuidlib.uuid5(_UUID_NS, f"{node}/{i}")), idle_temp)
            for i in range(count)
        ]
        self.faults: list[Fault] = []
        self._transitions: list[tuple[float, int, bool, Fault]] = []  # (time, seq, begins, f)
        self._inbox: str | None = None
        self._uses: tuple[TaskUse, ...] = ()  # the live tasks: their processes, their engines

    @classmethod
    def from_spec(cls, spec: str, node: str = "sim", **kw: object) -> SimulatedGpus:
        """``"8xH100"`` → 8 GPUs of the catalog's H100 (any catalog name or alias)."""
        m = re.fullmatch(r"\s*(\d+)\s*[xX×]\s*(\S+)\s*", spec)
        if m is None:
            raise ValueError(f"--simulate {spec!r}: expected COUNTxMODEL, e.g. 8xH100")
        count = int(m.group(1))
        if not 1 <= count <= 64:
            raise ValueError(f"--simulate {spec!r}: GPU count must be 1 to 64, not {count}")
        model = lookup(m.group(2), field="--simulate")
        # For tests of mixed fleets: GPUFLEET_SIM_DRIVER_VERSION / GPUFLEET_SIM_CUDA_VERSION in
        # the agent's environment make its simulated GPUs report that driver / CUDA version.
        for key, var in (("driver_version", _DRIVER_ENV), ("cuda_version", _CUDA_ENV)):
            if os.environ.get(var):
                kw.setdefault(key, os.environ[var])
        return cls(model, count, node, **kw)  # type: ignore[arg-type]

    def _mig(self, i: int) -> dict[str, object]:
        """A simulated MIG device's fields (none for a whole GPU): its profile, its index on
        its parent, and the parent's, as many to a parent as its compute slices allow."""
        if self._parent is None:
            return {}
        profile = self.model.name[len(self._parent.name) + 1 :]
        per = max(1, MIG_COMPUTE_SLICES // int(profile.split("g", 1)[0]))
        parent = i // per
        return {
            "mig_profile": profile,
            "mig_index": i % per,
            "parent_index": parent,
            "parent_uuid": "GPU-" + str(uuidlib.uuid5(_UUID_NS, f"{self.node}/parent/{parent}")),
        }

    # ----- faults -------------------------------------------------------------------------

    def inject(self, spec: str | Fault) -> Fault:
        f = parse_fault(spec) if isinstance(spec, str) else spec
        if f.gpu is not None and not 0 <= f.gpu < len(self._gpus):
            raise ValueError(
                f"fault {f.spec!r}: no GPU {f.gpu} on this node (it has 0–{len(self._gpus) - 1})"
            )
        self.faults.append(f)
        seq = len(self._transitions)
        self._transitions.append((self.start + f.at, seq, True, f))
        if f.duration is not None:
            self._transitions.append((self.start + f.end, seq + 1, False, f))
        self._transitions.sort(key=lambda x: (x[0], x[1]))
        return f

    def watch(self, inbox: str | os.PathLike[str]) -> None:
        """Take faults at run time from the file ``inbox`` (``--inject``'s specs, by commas or
        lines; the word ``reset`` resets the GPUs, as a site's remedy would), each AT counted
        from when it is read, the next time the GPUs are sampled or loaded; the file is removed
        then. A test injects an XID once the state it wants holds,
        instead of at a time guessed in advance. Write it whole (a temporary file renamed)."""
        self._inbox = os.fspath(inbox)

    def _take_inbox(self, now: float) -> None:
        if self._inbox is None:
            return
        try:
            with open(self._inbox, encoding="utf-8") as file:
                text = file.read()
            os.unlink(self._inbox)
        except FileNotFoundError:
            return
        for part in text.replace(",", "\n").split():
            if part == "reset":  # a GPU reset from outside (a site's remedy, in tests)
                self.reset()
                continue
            try:
                fault = parse_fault(part)
                self.inject(replace(fault, at=fault.at + (now - self.start)))
            except ValueError as e:  # a typo in the file must not stop the sampling
                log.warning("%s: %s (ignored)", self._inbox, e)

    def frozen(self, now: float) -> bool:
        return any(
            f.kind == "freeze" and self.start + f.at <= now < self.start + f.end
            for f in self.faults
        )

    def _apply(self, f: Fault, begins: bool) -> None:
        if f.gpu is None:
            return  # node faults are read by frozen(), not stored per GPU
        g = self._gpus[f.gpu]
        if f.kind == "xid" and f.xid is not None:
            if begins:  # a recurring one's end cures it; it logs nothing then
                g.pending_xids.append(f.xid)
        elif f.kind == "dbe" and begins:
            g.dbe += 1
            g.remapped_unc += 1  # Ampere and later remap the row instead of retiring a page
            g.pending_xids.append(48)  # the driver logs XID 48 for a DBE
        elif f.kind == "offbus":
            g.offbus = True
        elif f.kind == "hot":
            g.hot = begins
        elif f.kind == "nvlink":
            g.nvlink_down = begins

    def reset(self) -> str:
        """A GPU reset of every GPU (the heal loop's): it clears what a reset clears (pending
        XIDs, the volatile ECC counters; a GPU off the bus is back), not what the hardware does
        again: a recurring fault (``xid79@gpu0+1h``) logs its XID again, overheating and NVLink
        faults go on until they end."""
        for g in self._gpus:
            g.pending_xids.clear()
            g.dbe = 0
            g.offbus = False
        for f in self.faults:
            live = self.start + f.at <= self._t < self.start + f.end
            if f.kind in RECURRING and f.duration is not None and live and f.gpu is not None:
                self._apply(f, True)
        return f"GPU reset of {len(self._gpus)} simulated GPUs"

    # ----- the physics --------------------------------------------------------------------

    def _power(self, load: float) -> float:
        return self._idle_w + (self.model.tdp_w - self._idle_w) * min(1.0, max(0.0, load))

    def _steady_temp(self, power_w: float, hot: bool) -> float:
        th = self.thermal
        rise = th.full_power_rise_c * power_w / self.model.tdp_w
        return th.ambient_c + rise + (th.overheat_rise_c if hot else 0.0)

    def _evolve(self, dt: float) -> None:
        if dt <= 0:
            return
        decay = math.exp(-dt / self.thermal.tau_s)
        for g in self._gpus:
            p = self._power(g.load)
            target = self._steady_temp(p, g.hot)
            g.temp_c = target + (g.temp_c - target) * decay
            g.energy_mj += p * dt * 1000.0
            g.nvlink_bytes += 2 * self._nvlink_rate(g) * dt

    def _nvlink_rate(self, g: _Gpu) -> float:
        """Bytes/s each way: a busy gang moves about a third of the per-direction bandwidth."""
        if g.nvlink_down or not self._links:
            return 0.0
        return self.model.nvlink_gbs * 1e9 / 2 * min(1.0, max(0.0, g.load)) / 3

    def _advance(self, now: float) -> None:
        """Run the model to ``now``, applying each fault at its own instant."""
        if now <= self._t:
            return  # callers on other threads may be a hair behind: never run backwards
        self._take_inbox(now)
        while self._transitions and self._transitions[0][0] <= now:
            at, _, begins, f = self._transitions.pop(0)
            self._evolve(at - self._t)
            self._t = max(self._t, at)
            self._apply(f, begins)
        self._evolve(now - self._t)
        self._t = now

    # ----- the backend protocol -----------------------------------------------------------

    def set_load(self, load: Mapping[int, float], now: float, uses: Sequence[TaskUse] = ()) -> None:
        self._advance(now)  # the old load held until now
        for g in self._gpus:
            g.load = float(load.get(g.index, 0.0))
        self._uses = tuple(uses)

    def discover(self) -> list[GpuInfo]:
        return [
            GpuInfo(
                index=g.index,
                uuid=g.uuid,
                model=self.model.name,
                name=self.nvml_name,
                memory_mib=self._memory_mib,
                pci_bus_id=self._bus_id(g.index),
                pcie_gen=5 if self.model.name in ("B200", "H200", "H100-SXM", "H100-PCIe") else 4,
                pcie_width=16,
                nvlink_up=0 if g.nvlink_down else self._links,
            ).model_copy(update=self._mig(g.index))
            for g in self._gpus
            if not g.offbus
        ]

    @property
    def nvml_name(self) -> str:
        return NVML_NAMES.get(self.model.name, "NVIDIA " + self.model.name)

    @property
    def _memory_mib(self) -> int:
        return int(self.model.memory_gib * 1024)

    @staticmethod
    def _bus_id(i: int) -> str:
        return f"00000000:{0x18 + 0x10 * i:02X}:00.0"

    def driver_version(self) -> str:
        return self._driver

    def cuda_version(self) -> str:
        return self._cuda

    def sample(self, now: float) -> list[GpuSample]:
        self._advance(now)
        return [self._sample(g) for g in self._gpus if not g.offbus]

    def _sample(self, g: _Gpu) -> GpuSample:
        th = self.thermal
        util = min(1.0, max(0.0, g.load))
        total = self._memory_mib
        # NVML's memory info v2: total = reserved (the driver's) + used + free
        used = int(util * (total - _FB_RESERVED_MIB) * 0.9)
        max_sm, mem_clock = _CLOCKS_MHZ.get(self.model.name, _DEFAULT_CLOCKS)
        sm = int(_IDLE_SM_MHZ + (max_sm - _IDLE_SM_MHZ) * util)
        throttle = THROTTLE_GPU_IDLE if util == 0 else 0
        if g.temp_c >= th.slowdown_c:
            sm = int(sm * 0.6)
            throttle |= THROTTLE_HW_THERMAL | THROTTLE_SW_THERMAL
        links = 0 if g.nvlink_down else self._links
        nvlink = self._nvlink_rate(g)
        xids, g.pending_xids = tuple(g.pending_xids), []
        hbm = self.model.name not in _GDDR
        prof = {k: round(share * util, 4) for k, share in _PROF_SHARES.items()}
        procs, sessions = self._processes(g.index)
        # training and inference leave NVENC idle; input pipelines decode on the GPU; a task
        # given the video capability runs one encoder session (and decodes its input)
        enc, dec = engine_utils(
            self.model.name,
            min(100.0, sum(p.enc or 0.0 for p in procs)),
            min(100.0, round(5.0 * util, 2) + sum(_VIDEO_DEC * u.share for u in sessions)),
        )
        has_enc = enc is not None
        return GpuSample(
            index=g.index,
            uuid=g.uuid,
            model=self.model.name,
            name=self.nvml_name,
            pci_bus_id=self._bus_id(g.index),
            gpu_util=100.0 * util,
            mem_copy_util=60.0 * util,
            enc_util=enc,
            dec_util=dec,
            enc_sessions=len(sessions) if has_enc else None,
            enc_fps=(_ENC_FPS if sessions else 0.0) if has_enc else None,
            enc_latency_us=(_ENC_LATENCY_US if sessions else 0.0) if has_enc else None,
            processes=procs,
            fb_used=used,
            fb_free=total - _FB_RESERVED_MIB - used,
            fb_reserved=_FB_RESERVED_MIB,
            gpu_temp=g.temp_c,
            memory_temp=(g.temp_c + (g.temp_c - th.ambient_c) * _HBM_EXTRA_RISE if hbm else None),
            power_usage=self._power(g.load),
            total_energy_consumption=int(g.energy_mj),
            sm_clock=sm,
            mem_clock=mem_clock,
            pcie_replay_counter=0,
            ecc_sbe_vol_total=0,
            ecc_dbe_vol_total=g.dbe,
            correctable_remapped_rows=0,
            uncorrectable_remapped_rows=g.remapped_unc,
            row_remap_pending=1 if g.remapped_unc else 0,
            row_remap_failure=0,
            xid_errors=xids,
            clock_throttle_reasons=throttle,
            nvlink_bandwidth_total=int(g.nvlink_bytes) if self._links else None,
            vgpu_license_status=0,  # bare metal: no vGPU licence, as dcgm-exporter reports it
            nvlink_tx_bytes=nvlink,
            nvlink_rx_bytes=nvlink,
            nvlink_up=links,
            gr_engine_active=prof["gr_engine_active"],
            sm_active=prof["sm_active"],
            sm_occupancy=prof["sm_occupancy"],
            pipe_tensor_active=prof["pipe_tensor_active"],
            dram_active=prof["dram_active"],
            pcie_tx_bytes=_PCIE_IDLE_BPS + _PCIE_TX_BPS * util,
            pcie_rx_bytes=_PCIE_IDLE_BPS + _PCIE_RX_BPS * util,
        )

    def _processes(self, index: int) -> tuple[tuple[ProcessUse, ...], list[TaskUse]]:
        """Each live task's process on GPU ``index`` with its share of the engines, as NVML's
        per-process utilization gives it, and the tasks encoding on it (one session each)."""
        e = engines_of(self.model.name)
        procs, encoding = [], []
        for u in self._uses:
            if index not in u.gpus:
                continue
            video = u.video and (e.nvenc or 0) > 0
            if video:
                encoding.append(u)
            share = min(1.0, max(0.0, u.share))
            procs.append(
                ProcessUse(
                    pid=u.pid,
                    sm=round(100.0 * share, 2),
                    mem=round(60.0 * share, 2),
                    enc=(round(_VIDEO_ENC * share, 2) if video else 0.0) if e.nvenc else None,
                    dec=round((_VIDEO_DEC if video else 5.0) * share, 2) if e.nvdec else None,
                )
            )
        return tuple(procs), encoding

    def visible_devices(self, indices: Sequence[int]) -> str:
        if self._parent is not None:  # CUDA sees a MIG device only by its MIG-… UUID (as NVML)
            return ",".join(self._gpus[i].uuid for i in indices if 0 <= i < len(self._gpus))
        return ",".join(str(i) for i in indices)

    def close(self) -> None:
        return None
