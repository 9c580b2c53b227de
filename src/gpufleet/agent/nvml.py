"""The NVML backend (nvidia-ml-py's ``pynvml``).

The module is passed in (tests hand over a fake) and imported only when none is given, so this
file imports on a machine without a driver. Every NVML read is guarded: a call the device does
not support, or that fails, leaves its field ``None``; a monitoring read never stops the agent.
A call that answered NOT_SUPPORTED is not asked again for that GPU (a real H200 answers so to
the retired-page calls every time); any other failure is asked again at the next sample.
A GPU whose calls answer "GPU is lost" drops out of ``sample`` (the health check sees it gone).
DCGM's profiling fields (``DCGM_FI_PROF_*``), which NVML does not have, come from
``agent/dcgm.py`` where DCGM is installed, and are left out where it is not.

MIG (Multi-Instance GPU), as NVIDIA's device plugin's ``mig-strategy=mixed`` and Slurm's
AutoDetect=nvml do: a GPU whose current MIG mode is on offers its MIG devices, not itself (CUDA
sees only those on it, by their ``MIG-…`` UUIDs); each is a GPU of the node with its own UUID,
memory and model, the parent's catalog name and the profile (``H200-1g.18gb``). A GPU in MIG
mode without instances offers nothing. NVML has no utilisation, temperature, power, ECC or XIDs
per MIG device: each gets its parent's (an XID on the parent makes all its slices unhealthy),
and its own memory. The node's GPUs are numbered in NVML's order, a MIG GPU's devices in its
place, so a node without MIG keeps NVML's indices. DCGM's profiling fields go to whole GPUs only.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from gpufleet.agent.dcgm import DcgmProfiling
from gpufleet.agent.gpu import PROF_FIELDS, DeviceRef, GpuSample, GpuUnavailable
from gpufleet.api.schemas import GpuInfo
from gpufleet.model.catalog import GPU_MODELS, GpuModel, find, mig_name

log = logging.getLogger(__name__)

MIB = 1 << 20
_MAX_EVENTS_PER_SAMPLE = 256  # bounded drain of the XID event set
_GPU_IS_LOST = 15  # NVML_ERROR_GPU_IS_LOST, when the module lacks the constant
_NOT_SUPPORTED = 3  # NVML_ERROR_NOT_SUPPORTED, likewise
_VENDOR_WORDS = frozenset({"NVIDIA", "TESLA", "QUADRO", "AMD"})
_MEMORY_TOLERANCE = 0.15  # NVML reports a little less than the marketing size
_AUTO: Any = object()
# NVML field ids (nvml.h) where the module lacks the constant
_FI_DEV_MEMORY_TEMP = 82
_GRID_LICENSE_LICENSED = 1  # NVML_GRID_LICENSE_STATE_LICENSED (featureState of a feature)
_MIG_ENABLE = 1  # NVML_DEVICE_MIG_ENABLE (nvmlDeviceGetMigMode's current mode)
# a MIG profile takes 1, 2, 4 or 8 eighths of its GPU's memory (A30's quarters are eighths too)
_MEMORY_EIGHTHS = (1, 2, 4, 8)


def catalog_name(raw: str, memory_mib: int | None = None) -> str:
    """The GPU catalog's name for an NVML device name ("NVIDIA H100 80GB HBM3" → "H100-SXM").

    The longest known prefix of the name wins; the memory size then picks the right member of
    the family ("A100-PCIE-40GB" matches "A100", which is the 80 GB part). Unknown: the raw name.
    """
    words = [w for w in raw.upper().replace("_", " ").split() if w not in _VENDOR_WORDS]
    tokens = [t for t in "-".join(words).split("-") if t]
    model: GpuModel | None = None
    for n in range(len(tokens), 0, -1):
        model = find("-".join(tokens[:n]))
        if model is not None:
            break
    if model is None:
        return raw.strip()
    if memory_mib:
        model = _by_memory(model, tokens[0], memory_mib / 1024)
    return model.name


def _by_memory(model: GpuModel, family: str, memory_gib: float) -> GpuModel:
    def off(m: GpuModel) -> float:
        return abs(m.memory_gib - memory_gib) / m.memory_gib

    if off(model) <= _MEMORY_TOLERANCE:
        return model
    kin = [
        m
        for m in GPU_MODELS
        if any(k.upper().split("-")[0] == family for k in (m.name, *m.aliases))
    ]
    best = min(kin, key=off, default=model)
    return best if off(best) <= _MEMORY_TOLERANCE else model


def mig_profile(slices: int, memory_mib: int, parent_mib: int, parent_gb: float = 0.0) -> str:
    """nvidia-smi's name of a MIG profile, ``<GPU-instance slices>g.<memory GB>gb``, from what
    NVML gives of a MIG device: its GPU-instance slices and its memory. The GB are the parent's
    marketed memory (``parent_gb``, the catalog's; else its own in GB) times the device's share
    of it, snapped to 1, 2, 4 or 8 eighths (a profile takes whole memory slices; the driver keeps
    a little of each), rounded half up: an H200 (141 GB) → 1g.18gb, 3g.71gb, 7g.141gb; an
    A100-40GB → 1g.5gb, 3g.20gb. The "+me"/"+gfx" variants are not told apart."""
    if parent_mib <= 0:
        return f"{slices}g.{math.ceil(memory_mib / 1024)}gb"
    share = max(memory_mib, 1) / parent_mib * 8
    eighths = min(_MEMORY_EIGHTHS, key=lambda e: abs(math.log(share / e)))
    total = parent_gb or parent_mib * MIB / 1e9
    return f"{slices}g.{math.floor(total * eighths / 8 + 0.5)}gb"


def _import_pynvml() -> Any:
    try:
        import pynvml  # type: ignore[import-untyped]  # deferred: simulating needs no NVML
    except ImportError as e:
        raise GpuUnavailable(
            "NVML: nvidia-ml-py is not installed (pip install nvidia-ml-py), "
            "or run the agent with --simulate"
        ) from e
    return pynvml


def _text(v: Any) -> str:
    return v.decode(errors="replace") if isinstance(v, bytes) else str(v)


class NvmlBackend:
    """Real GPUs. ``nvml`` is a pynvml-like module; ``None`` imports nvidia-ml-py's.
    ``profiling``: DCGM's profiling reader (``DcgmProfiling``), ``None`` for none; by default
    the local DCGM host engine's when DCGM is installed."""

    def __init__(self, nvml: Any | None = None, profiling: Any = _AUTO) -> None:
        if nvml is None:
            nvml = _import_pynvml()
        self.nv = nvml
        self._err: type[BaseException] = getattr(nvml, "NVMLError", Exception)
        try:
            nvml.nvmlInit()
        except Exception as e:  # NVMLError_DriverNotLoaded, LibraryNotFound, ...
            raise GpuUnavailable(
                f"NVML cannot start: {e} (is the NVIDIA driver loaded? "
                "use --simulate NxMODEL to run without GPUs)"
            ) from e
        # the node's GPUs (index → handle, info): whole GPUs and MIG devices
        self._handles: dict[int, Any] = {}
        self._info: dict[int, GpuInfo] = {}
        # the physical GPUs (NVML index → handle, info as a whole GPU), MIG mode on or off
        self._phys: dict[int, Any] = {}
        self._phys_info: dict[int, GpuInfo] = {}
        self._parent_of: dict[int, int] = {}  # the node's GPU → its physical GPU's NVML index
        self._mig: dict[int, tuple[int, int]] = {}  # a MIG device → (parent, its MIG index)
        self._gpu_instance: dict[int, int] = {}  # a MIG device → its GPU instance id
        self._said_empty: set[str] = set()  # UUIDs of what was logged once (no instances, …)
        # a device: a physical GPU's NVML index, or (parent, MIG index) for a MIG device
        self._lost: set[Hashable] = set()
        # (device, call, its arguments after the handle) that answered NOT_SUPPORTED: a
        # property of the device (an H200 has no retired pages), not asked again every sample
        self._unsupported: set[tuple[Hashable, str, str]] = set()
        self._events: Any = None
        self._nvlink_prev: dict[int, tuple[float, int, int]] = {}
        self._names: dict[int, str] = {}
        self.discover()
        self._events = self._open_xid_events()
        self.profiling: Any = DcgmProfiling.open() if profiling is _AUTO else profiling

    # ----- guarded calls ------------------------------------------------------------------

    def _call(self, gpu: Hashable | None, name: str, *args: Any) -> Any:
        fn = getattr(self.nv, name, None)
        if fn is None:  # an older nvidia-ml-py without this function
            return None
        key = (gpu, name, repr(args[1:])) if gpu is not None else None
        if key is not None and key in self._unsupported:
            return None
        try:
            return fn(*args)
        except Exception as e:  # NVMLError above all; nothing here may crash the agent
            code = getattr(e, "value", None)
            if gpu is not None and code == self._const("NVML_ERROR_GPU_IS_LOST", _GPU_IS_LOST):
                self._lost.add(gpu)
            if key is not None and code == self._const("NVML_ERROR_NOT_SUPPORTED", _NOT_SUPPORTED):
                self._unsupported.add(key)
                log.debug("NVML %s%s is not supported on GPU %s", name, args[1:], gpu)
            else:
                log.debug("NVML %s%s failed: %s", name, args[1:], e)
            return None

    def _const(self, name: str, default: int) -> int:
        return int(getattr(self.nv, name, default))

    # ----- discovery ----------------------------------------------------------------------

    def discover(self) -> list[GpuInfo]:
        count = self._call(None, "nvmlDeviceGetCount") or 0
        handles: dict[int, Any] = {}
        infos: dict[int, GpuInfo] = {}
        phys: dict[int, Any] = {}
        phys_info: dict[int, GpuInfo] = {}
        parent_of: dict[int, int] = {}
        migs: dict[int, tuple[int, int]] = {}
        instances: dict[int, int] = {}
        extra = 0  # MIG devices before this GPU, less the GPUs they stand for
        for i in range(int(count)):
            h = self._call(i, "nvmlDeviceGetHandleByIndex", i)
            if h is None:
                continue  # a GPU the driver cannot open now is a missing GPU
            whole = self._whole(i, h)
            if whole is None:
                continue
            phys[i], phys_info[i] = h, whole
            if not self._mig_enabled(i, h):
                idx = i + extra
                handles[idx], infos[idx], parent_of[idx] = (
                    h,
                    whole.model_copy(update={"index": idx}),
                    i,
                )
                continue
            found = self._mig_devices(i, h, whole)
            if not found and whole.uuid not in self._said_empty:  # said once, not each register
                self._said_empty.add(whole.uuid)
                log.warning(
                    "GPU %d (%s) is in MIG mode with no MIG devices: it offers no GPU "
                    "(create instances with nvidia-smi mig, or turn MIG mode off)",
                    i,
                    whole.uuid,
                )
            for n, (k, mh, info, gi) in enumerate(found):
                idx = i + extra + n
                handles[idx], infos[idx], parent_of[idx] = (
                    mh,
                    info.model_copy(update={"index": idx}),
                    i,
                )
                migs[idx] = (i, k)
                if gi is not None:
                    instances[idx] = gi
            extra += len(found) - 1
        self._handles, self._info, self._phys, self._phys_info = handles, infos, phys, phys_info
        self._parent_of, self._mig, self._gpu_instance = parent_of, migs, instances
        return list(infos.values())

    def _whole(self, i: int, h: Any) -> GpuInfo | None:
        """Physical GPU ``i`` as a whole GPU (None: it has no UUID, so it cannot be named)."""
        uuid = self._call(i, "nvmlDeviceGetUUID", h)
        if uuid is None:
            return None
        mem = self._call(i, "nvmlDeviceGetMemoryInfo", h)
        memory_mib = int(mem.total // MIB) if mem is not None else 0
        name = self._call(i, "nvmlDeviceGetName", h)
        pci = self._call(i, "nvmlDeviceGetPciInfo", h)
        return GpuInfo(
            index=i,
            uuid=_text(uuid),
            model=catalog_name(_text(name), memory_mib) if name is not None else "unknown",
            name=_text(name).strip() if name is not None else "",
            memory_mib=memory_mib,
            pci_bus_id=_text(pci.busId) if pci is not None else "",
            pcie_gen=int(self._call(i, "nvmlDeviceGetCurrPcieLinkGeneration", h) or 0),
            pcie_width=int(self._call(i, "nvmlDeviceGetCurrPcieLinkWidth", h) or 0),
            nvlink_up=self._nvlink_up(i, h),
        )

    def _mig_enabled(self, i: int, h: Any) -> bool:
        """The GPU's current MIG mode (a pending change counts once the GPU is reset). An old
        driver or module without the call, or a GPU without MIG: off."""
        got = self._call(i, "nvmlDeviceGetMigMode", h)  # [current, pending]
        if got is None:
            return False
        current = got[0] if isinstance(got, list | tuple) else got
        return int(current) == self._const("NVML_DEVICE_MIG_ENABLE", _MIG_ENABLE)

    def _mig_devices(
        self, i: int, h: Any, parent: GpuInfo
    ) -> list[tuple[int, Any, GpuInfo, int | None]]:
        """GPU ``i``'s MIG devices: (MIG index, handle, info, GPU instance id). An index without
        a device (NOT_FOUND: the slots are sparse) or whose UUID cannot be read is skipped."""
        top = int(self._call(i, "nvmlDeviceGetMaxMigDeviceCount", h) or 0)
        catalog = find(parent.model)
        parent_gb = catalog.memory_gib if catalog is not None else 0.0
        out = []
        for k in range(top):
            mh = self._call(i, "nvmlDeviceGetMigDeviceHandleByIndex", h, k)
            if mh is None:
                continue
            d = (i, k)
            uuid = self._call(d, "nvmlDeviceGetUUID", mh)
            if uuid is None:
                continue
            mem = self._call(d, "nvmlDeviceGetMemoryInfo", mh)
            attrs = self._call(d, "nvmlDeviceGetAttributes", mh)
            memory_mib = int(mem.total // MIB) if mem is not None else 0
            if attrs is not None:
                size = int(getattr(attrs, "memorySizeMB", 0)) or memory_mib
                slices = int(getattr(attrs, "gpuInstanceSliceCount", 0))
                profile = mig_profile(slices, size, parent.memory_mib, parent_gb) if slices else ""
            else:
                profile = ""
            if not profile and _text(uuid) not in self._said_empty:  # once, not each register
                self._said_empty.add(_text(uuid))
                log.warning("MIG device %d of GPU %d: no profile (NVML gave no attributes)", k, i)
            gi = self._call(d, "nvmlDeviceGetGpuInstanceId", mh)
            info = GpuInfo(
                index=i,  # renumbered by discover
                uuid=_text(uuid),
                # never the parent's own model: a job asking for a whole GPU must not get a slice
                model=mig_name(parent.model, profile or "mig"),
                name=parent.name,
                memory_mib=memory_mib,
                pci_bus_id=parent.pci_bus_id,
                pcie_gen=parent.pcie_gen,
                pcie_width=parent.pcie_width,
                nvlink_up=parent.nvlink_up,
                mig_profile=profile or "mig",
                mig_index=k,
                parent_index=i,
                parent_uuid=parent.uuid,
            )
            out.append((k, mh, info, int(gi) if gi is not None else None))
        return out

    def _nvlink_up(self, i: int, h: Any) -> int:
        enabled = self._const("NVML_FEATURE_ENABLED", 1)
        up = 0
        for link in range(self._const("NVML_NVLINK_MAX_LINKS", 18)):
            fn = getattr(self.nv, "nvmlDeviceGetNvLinkState", None)
            if fn is None:
                break
            try:
                state = fn(h, link)
            except Exception:  # past the last link, or no NVLink at all
                break
            up += int(state == enabled)
        return up

    def driver_version(self) -> str:
        v = self._call(None, "nvmlSystemGetDriverVersion")
        return _text(v) if v is not None else ""

    def cuda_version(self) -> str:
        v = self._call(None, "nvmlSystemGetCudaDriverVersion")
        if v is None:
            return ""
        v = int(v)  # e.g. 12040 → "12.4"
        return f"{v // 1000}.{(v % 1000) // 10}"

    # ----- sampling -----------------------------------------------------------------------

    def sample(self, now: float) -> list[GpuSample]:
        xids = self._drain_xids()
        prof = self._profiling()
        parents: dict[int, GpuSample] = {}  # each physical GPU read once, for all its devices
        out = []
        for idx, info in self._info.items():
            p = self._parent_of[idx]
            if p not in parents:
                parents[p] = self._sample_one(p, self._phys[p], now, tuple(xids.get(p, ())))
            if p in self._lost:
                continue
            mig = self._mig.get(idx)
            if mig is None:
                s = replace(parents[p], index=idx)
                got = prof.get(s.uuid) or prof.get(f"#{p}")  # DCGM's GPU ids are NVML's
                out.append(replace(s, **got) if got else s)
                continue
            s = self._sample_mig(idx, mig, info, parents[p])
            if mig not in self._lost:
                out.append(s)
        return out

    def _sample_mig(
        self, idx: int, d: tuple[int, int], info: GpuInfo, parent: GpuSample
    ) -> GpuSample:
        """A MIG device: its own memory, the rest its parent's (NVML has no per-instance
        utilisation, temperature, power, ECC or XIDs), its parent's XIDs included."""
        h = self._handles[idx]
        mem = self._call(d, "nvmlDeviceGetMemoryInfo", h)
        mem2 = self._memory_v2(d, h)
        if mem2 is not None:
            mem = mem2
        return replace(
            parent,
            index=idx,
            uuid=info.uuid,
            model=info.model,
            fb_used=int(mem.used // MIB) if mem is not None else None,
            fb_free=int(mem.free // MIB) if mem is not None else None,
            fb_reserved=(
                int(mem2.reserved // MIB) if getattr(mem2, "reserved", None) is not None else None
            ),
            mig_profile=info.mig_profile,
            gpu_instance_id=self._gpu_instance.get(idx),
        )

    def _profiling(self) -> dict[str, dict[str, float]]:
        if self.profiling is None:
            return {}
        try:
            got = self.profiling.read()
        except Exception as e:  # a profiling read never stops the agent
            log.debug("DCGM profiling read failed: %s", e)
            return {}
        return {
            gpu: {k: float(v) for k, v in values.items() if k in PROF_FIELDS}
            for gpu, values in got.items()
        }

    def _sample_one(self, i: int, h: Any, now: float, xids: tuple[int, ...]) -> GpuSample:
        """Physical GPU ``i`` (its NVML index) as a whole GPU."""
        nv = self.nv
        info = self._phys_info[i]
        util = self._call(i, "nvmlDeviceGetUtilizationRates", h)
        mem = self._call(i, "nvmlDeviceGetMemoryInfo", h)
        power_mw = self._call(i, "nvmlDeviceGetPowerUsage", h)
        vol = self._const("NVML_VOLATILE_ECC", 0)
        corrected = self._const("NVML_MEMORY_ERROR_TYPE_CORRECTED", 0)
        uncorrected = self._const("NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1)
        rows = self._call(i, "nvmlDeviceGetRemappedRows", h)  # (corr, unc, pending, failure)
        tx, rx, nvlink_total = self._nvlink_rates(i, h, now)
        # memory info v2 splits out what the driver reserves (used then excludes it)
        mem2 = self._memory_v2(i, h)
        if mem2 is not None:
            mem = mem2
        return GpuSample(
            index=i,
            uuid=info.uuid,
            model=info.model,
            name=info.name,
            pci_bus_id=info.pci_bus_id,
            gpu_util=_num(util, "gpu"),
            mem_copy_util=_num(util, "memory"),
            enc_util=_item(self._call(i, "nvmlDeviceGetEncoderUtilization", h), 0),
            dec_util=_item(self._call(i, "nvmlDeviceGetDecoderUtilization", h), 0),
            fb_used=int(mem.used // MIB) if mem is not None else None,
            fb_free=int(mem.free // MIB) if mem is not None else None,
            fb_reserved=(
                int(mem2.reserved // MIB) if getattr(mem2, "reserved", None) is not None else None
            ),
            gpu_temp=_opt_float(
                self._call(i, "nvmlDeviceGetTemperature", h, self._const("NVML_TEMPERATURE_GPU", 0))
            ),
            memory_temp=self._memory_temp(i, h),
            power_usage=power_mw / 1000.0 if power_mw is not None else None,
            total_energy_consumption=_opt_int(
                self._call(i, "nvmlDeviceGetTotalEnergyConsumption", h)
            ),
            sm_clock=_opt_int(
                self._call(i, "nvmlDeviceGetClockInfo", h, self._const("NVML_CLOCK_SM", 1))
            ),
            mem_clock=_opt_int(
                self._call(i, "nvmlDeviceGetClockInfo", h, self._const("NVML_CLOCK_MEM", 2))
            ),
            pcie_replay_counter=_opt_int(self._call(i, "nvmlDeviceGetPcieReplayCounter", h)),
            ecc_sbe_vol_total=_opt_int(
                self._call(i, "nvmlDeviceGetTotalEccErrors", h, corrected, vol)
            ),
            ecc_dbe_vol_total=_opt_int(
                self._call(i, "nvmlDeviceGetTotalEccErrors", h, uncorrected, vol)
            ),
            retired_sbe=self._retired(
                i, h, self._const("NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS", 0)
            ),
            retired_dbe=self._retired(
                i, h, self._const("NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR", 1)
            ),
            retired_pending=_opt_int(self._call(i, "nvmlDeviceGetRetiredPagesPendingStatus", h)),
            correctable_remapped_rows=_item(rows, 0),
            uncorrectable_remapped_rows=_item(rows, 1),
            row_remap_pending=_item(rows, 2),
            row_remap_failure=_item(rows, 3),
            xid_errors=xids,
            clock_throttle_reasons=self._throttle(i, h),
            nvlink_bandwidth_total=nvlink_total,
            vgpu_license_status=self._vgpu_license(i, h),
            nvlink_tx_bytes=tx,
            nvlink_rx_bytes=rx,
            nvlink_up=self._nvlink_up(i, h) if hasattr(nv, "nvmlDeviceGetNvLinkState") else None,
        )

    def _memory_v2(self, i: Hashable, h: Any) -> Any:
        """NVML's memory info v2 (total = reserved + used + free), or None where unsupported."""
        version = getattr(self.nv, "nvmlMemory_v2", None)
        if version is None:
            return None
        m = self._call(i, "nvmlDeviceGetMemoryInfo", h, version)
        return m if getattr(m, "reserved", None) is not None else None

    def _memory_temp(self, i: int, h: Any) -> float | None:
        """The HBM's temperature (NVML's field NVML_FI_DEV_MEMORY_TEMP); GDDR boards have none."""
        fid = int(getattr(self.nv, "NVML_FI_DEV_MEMORY_TEMP", _FI_DEV_MEMORY_TEMP))
        values = self._call(i, "nvmlDeviceGetFieldValues", h, [fid])
        if not values:
            return None
        v = _field_value(values[0])
        return float(v) if v is not None and v > 0 else None  # 0: the board has no sensor

    def _vgpu_license(self, i: int, h: Any) -> int | None:
        """1 when the GPU holds a vGPU licence, 0 when it can but does not; None where the GPU
        has no licensable features (bare metal without vGPU software: NVML_ERROR_NOT_SUPPORTED).
        """
        for name in (
            "nvmlDeviceGetGridLicensableFeatures_v4",
            "nvmlDeviceGetGridLicensableFeatures_v3",
            "nvmlDeviceGetGridLicensableFeatures",
        ):
            if hasattr(self.nv, name):
                got = self._call(i, name, h)
                break
        else:
            return None
        if got is None or not getattr(got, "isGridLicenseSupported", 0):
            return None
        count = int(getattr(got, "licensableFeaturesCount", 0))
        feats = list(getattr(got, "gridLicensableFeatures", ()))[:count]
        return int(any(getattr(f, "featureState", 0) == _GRID_LICENSE_LICENSED for f in feats))

    def _retired(self, i: int, h: Any, cause: int) -> int | None:
        pages = self._call(i, "nvmlDeviceGetRetiredPages", h, cause)
        return len(pages) if pages is not None else None

    def _throttle(self, i: int, h: Any) -> int | None:
        # "clocks event reasons" is the new name of "clocks throttle reasons" (NVML 12.2+)
        for name in (
            "nvmlDeviceGetCurrentClocksEventReasons",
            "nvmlDeviceGetCurrentClocksThrottleReasons",
        ):
            if hasattr(self.nv, name):
                return _opt_int(self._call(i, name, h))
        return None

    def _nvlink_rates(
        self, i: int, h: Any, now: float
    ) -> tuple[float | None, float | None, int | None]:
        """Bytes/s from NVML's cumulative NVLink data counters (KiB), so the first is None,
        and the counters' sum in bytes (DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL)."""
        tx_id = getattr(self.nv, "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX", None)
        rx_id = getattr(self.nv, "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX", None)
        if tx_id is None or rx_id is None or not self._phys_info[i].nvlink_up:
            return None, None, None
        values = self._call(i, "nvmlDeviceGetFieldValues", h, [tx_id, rx_id])
        if values is None or len(values) < 2:
            return None, None, None
        tx, rx = (_field_value(v) for v in values[:2])
        if tx is None or rx is None:
            return None, None, None
        total = (tx + rx) * 1024
        prev = self._nvlink_prev.get(i)
        self._nvlink_prev[i] = (now, tx, rx)
        if prev is None or now <= prev[0] or tx < prev[1] or rx < prev[2]:
            return None, None, total
        dt = now - prev[0]
        return (tx - prev[1]) * 1024 / dt, (rx - prev[2]) * 1024 / dt, total

    # ----- XID events ---------------------------------------------------------------------

    def _open_xid_events(self) -> Any:
        es = self._call(None, "nvmlEventSetCreate")
        if es is None:
            return None
        mask = self._const("nvmlEventTypeXidCriticalError", 0x8)
        for i, h in self._phys.items():  # a MIG GPU's XIDs come from the GPU itself
            self._call(i, "nvmlDeviceRegisterEvents", h, mask, es)  # unsupported: no XIDs
        return es

    def _drain_xids(self) -> dict[int, list[int]]:
        """XIDs since the last sample by physical GPU (NVML index): wait with a 0 ms timeout
        until the set is empty."""
        out: dict[int, list[int]] = {}
        if self._events is None:
            return out
        wait = getattr(self.nv, "nvmlEventSetWait_v2", None) or getattr(
            self.nv, "nvmlEventSetWait", None
        )
        if wait is None:
            return out
        for _ in range(_MAX_EVENTS_PER_SAMPLE):
            try:
                data = wait(self._events, 0)
            except Exception:  # NVMLError_Timeout: nothing more pending
                break
            gpu = self._index_of(data.device)
            if gpu is None:
                log.warning("XID %s from a device the agent cannot name", data.eventData)
                continue
            out.setdefault(gpu, []).append(int(data.eventData))
        return out

    def _index_of(self, device: Any) -> int | None:
        idx = self._call(None, "nvmlDeviceGetIndex", device)
        if idx is not None and int(idx) in self._phys:
            return int(idx)
        for i, h in self._phys.items():
            if h is device or h == device:
                return i
        uuid = self._call(None, "nvmlDeviceGetUUID", device)
        for i, info in self._phys_info.items():
            if uuid is not None and info.uuid == _text(uuid):
                return i
        return None

    # ----- the rest of the protocol -------------------------------------------------------

    def visible_devices(self, indices: Sequence[int]) -> str:
        # UUIDs, not indices: CUDA's enumeration order need not match NVML's, and CUDA sees a
        # MIG device only by its MIG-… UUID
        return ",".join(self._info[i].uuid if i in self._info else str(i) for i in indices)

    def device_refs(self, indices: Sequence[int]) -> list[DeviceRef]:
        """How container runtimes name these GPUs (an index not discovered: itself)."""
        out = []
        for i in indices:
            info = self._info.get(i)
            if info is None:
                out.append(DeviceRef(i, str(i), i))
                continue
            mig = self._mig.get(i)
            out.append(
                DeviceRef(i, info.uuid, self._parent_of[i], mig[1] if mig is not None else None)
            )
        return out

    def set_load(self, load: Mapping[int, float], now: float) -> None:
        return None  # real GPUs report their own utilization

    def frozen(self, now: float) -> bool:
        return False

    def close(self) -> None:
        if self._events is not None:
            self._call(None, "nvmlEventSetFree", self._events)
            self._events = None
        if self.profiling is not None:
            try:
                self.profiling.close()
            except Exception as e:
                log.debug("DCGM close failed: %s", e)
            self.profiling = None
        self._call(None, "nvmlShutdown")


def _num(obj: Any, attr: str) -> float | None:
    return float(getattr(obj, attr)) if obj is not None else None


def _opt_int(v: Any) -> int | None:
    return int(v) if v is not None else None


def _opt_float(v: Any) -> float | None:
    return float(v) if v is not None else None


def _item(t: Any, k: int) -> int | None:
    return int(t[k]) if t is not None and len(t) > k else None


# nvmlValueType_t → the c_nvmlValue_t union member that holds it
_VALUE_MEMBERS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal"}


def _field_value(fv: Any) -> int | None:
    if getattr(fv, "nvmlReturn", 0) != 0:
        return None
    member = _VALUE_MEMBERS.get(int(getattr(fv, "valueType", 3)), "ullVal")
    v = getattr(fv.value, member, None)
    return int(v) if v is not None else None
