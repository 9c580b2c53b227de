"""``NvmlBackend``: the agent's GPU backend on real GPUs, over NVML's guarded calls (``calls``):
discovery (``discovery``), each GPU's sample (``readings``), MIG devices' samples from their
parents', XID events, and DCGM's profiling fields where DCGM is installed."""

from __future__ import annotations

import logging
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from gpufleet.agent.dcgm import DcgmProfiling
from gpufleet.agent.gpu import PROF_FIELDS, DeviceRef, GpuSample, GpuUnavailable, TaskUse
from gpufleet.agent.nvml import discovery, readings
from gpufleet.agent.nvml.calls import NvmlCalls, import_pynvml, text
from gpufleet.agent.nvml.engines import SeenStamps
from gpufleet.api.schemas import GpuInfo

log = logging.getLogger(__name__)

_MAX_EVENTS_PER_SAMPLE = 256  # bounded drain of the XID event set
_AUTO: Any = object()


class NvmlBackend:
    """Real GPUs. ``nvml`` is a pynvml-like module; ``None`` imports nvidia-ml-py's.
    ``profiling``: DCGM's profiling reader (``DcgmProfiling``), ``None`` for none; by default
    the local DCGM host engine's when DCGM is installed."""

    def __init__(self, nvml: Any | None = None, profiling: Any = _AUTO) -> None:
        if nvml is None:
            nvml = import_pynvml()
        self.nv = nvml
        self.calls = NvmlCalls(nvml)
        try:
            nvml.nvmlInit()
        except Exception as e:  # NVMLError_DriverNotLoaded, LibraryNotFound, ...
            raise GpuUnavailable(
                f"NVML cannot start: {e} (is the NVIDIA driver loaded? "
                "use --simulate NxMODEL to run without GPUs)"
            ) from e
        self.inv = discovery.Inventory()
        self._said: set[str] = set()  # UUIDs of what was logged once (no instances, …)
        self._events: Any = None
        self._nvlink: readings.NvlinkCounters = {}
        self._seen: SeenStamps = {}  # per-process samples read up to here, per GPU
        self.discover()
        self._events = self._open_xid_events()
        self.profiling: Any = DcgmProfiling.open() if profiling is _AUTO else profiling

    def _call(self, gpu: Hashable | None, name: str, *args: Any) -> Any:
        return self.calls.call(gpu, name, *args)

    def _const(self, name: str, default: int) -> int:
        return self.calls.const(name, default)

    # ----- discovery ----------------------------------------------------------------------

    def discover(self) -> list[GpuInfo]:
        self.inv = discovery.discover(self.calls, self._said)
        return list(self.inv.info.values())

    def driver_version(self) -> str:
        v = self._call(None, "nvmlSystemGetDriverVersion")
        return text(v) if v is not None else ""

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
        mig_parents = {parent for parent, _ in self.inv.mig.values()}
        out = []
        for idx, info in self.inv.info.items():
            p = self.inv.parent_of[idx]
            if p not in parents:
                parents[p] = readings.sample_whole(
                    self.calls,
                    p,
                    self.inv.phys[p],
                    self.inv.phys_info[p],
                    now,
                    tuple(xids.get(p, ())),
                    self._nvlink,
                    # a GPU in MIG mode has no per-process figures to split among its devices
                    None if p in mig_parents else self._seen,
                )
            if p in self.calls.lost:
                continue
            mig = self.inv.mig.get(idx)
            if mig is None:
                s = replace(parents[p], index=idx)
                # DCGM's GPU ids are NVML's
                got: dict[str, Any] | None = prof.get(s.uuid) or prof.get(f"#{p}")
                out.append(replace(s, **got) if got else s)
                continue
            s = self._sample_mig(idx, mig, info, parents[p])
            if mig not in self.calls.lost:
                out.append(s)
        return out

    def _sample_mig(
        self, idx: int, d: tuple[int, int], info: GpuInfo, parent: GpuSample
    ) -> GpuSample:
        """A MIG device: its own memory, the rest its parent's (NVML has no per-instance
        utilisation, temperature, power, ECC or XIDs), its parent's XIDs included."""
        used, free, reserved = readings.memory(self.calls, d, self.inv.handles[idx])
        return replace(
            parent,
            index=idx,
            uuid=info.uuid,
            model=info.model,
            fb_used=used,
            fb_free=free,
            fb_reserved=reserved,
            mig_profile=info.mig_profile,
            gpu_instance_id=self.inv.gpu_instance.get(idx),
            # the encoder and the processes are the parent's: NVML does not split them per
            # MIG device, so a device reports none (absent, not the parent's figures)
            enc_sessions=None,
            enc_fps=None,
            enc_latency_us=None,
            processes=(),
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

    # ----- XID events ---------------------------------------------------------------------

    def _open_xid_events(self) -> Any:
        es = self._call(None, "nvmlEventSetCreate")
        if es is None:
            return None
        mask = self._const("nvmlEventTypeXidCriticalError", 0x8)
        for i, h in self.inv.phys.items():  # a MIG GPU's XIDs come from the GPU itself
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
        if idx is not None and int(idx) in self.inv.phys:
            return int(idx)
        for i, h in self.inv.phys.items():
            if h is device or h == device:
                return i
        uuid = self._call(None, "nvmlDeviceGetUUID", device)
        for i, info in self.inv.phys_info.items():
            if uuid is not None and info.uuid == text(uuid):
                return i
        return None

    # ----- the rest of the protocol -------------------------------------------------------

    def visible_devices(self, indices: Sequence[int]) -> str:
        # UUIDs, not indices: CUDA's enumeration order need not match NVML's, and CUDA sees a
        # MIG device only by its MIG-… UUID
        return ",".join(self.inv.info[i].uuid if i in self.inv.info else str(i) for i in indices)

    def device_refs(self, indices: Sequence[int]) -> list[DeviceRef]:
        """How container runtimes name these GPUs (an index not discovered: itself)."""
        out = []
        for i in indices:
            info = self.inv.info.get(i)
            if info is None:
                out.append(DeviceRef(i, str(i), i))
                continue
            mig = self.inv.mig.get(i)
            out.append(
                DeviceRef(i, info.uuid, self.inv.parent_of[i], mig[1] if mig is not None else None)
            )
        return out

    def reset(self) -> str:
        """Reset the node's GPUs for the heal loop (``nvml/reset.py`` says how, and what NVML
        cannot do); raises ``ResetFailed`` with why."""
        from gpufleet.agent.nvml.reset import reset_all

        return reset_all(self)

    def restart(self) -> None:
        """NVML started again (after a reset): discovery and the XID event set anew."""
        if self._events is not None:
            self._call(None, "nvmlEventSetFree", self._events)
            self._events = None
        self._call(None, "nvmlShutdown")
        self._call(None, "nvmlInit")
        self.calls.lost.clear()
        self._nvlink = {}
        self._seen = {}
        self.discover()
        self._events = self._open_xid_events()

    def set_load(self, load: Mapping[int, float], now: float, uses: Sequence[TaskUse] = ()) -> None:
        return None  # real GPUs report their own utilization and processes

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
