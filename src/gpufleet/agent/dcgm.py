"""DCGM's profiling fields (``DCGM_FI_PROF_*``) for the NVML backend, when DCGM is installed.

NVML has no graphics-engine, tensor-pipe, DRAM or PCIe-byte-rate counters: only DCGM's profiling
module (the hardware's performance monitors, through ``nv-hostengine``) measures them. This reads
them through DCGM's Python bindings (``pydcgm``, shipped with DCGM under
``/usr/local/dcgm/bindings/python3`` or ``/usr/share/datacenter-gpu-manager-4/bindings/python3``).
Where DCGM is absent, or its host engine does not answer, ``DcgmProfiling.open`` gives ``None``
and the agent's samples leave the fields out: the controller then emits no ``DCGM_FI_PROF_*``
series for that GPU, never a zero that a real GPU did not report. A field DCGM leaves blank (a
GPU without profiling support, or one whose monitors another tool holds) is left out the same
way. Every call is guarded: a profiling read never stops the agent.
"""

from __future__ import annotations

import importlib
import logging
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

# DCGM field ids (dcgm_fields.h; stable across DCGM releases) → the GpuSample field they fill
PROF_FIELD_IDS: dict[int, str] = {
    1001: "gr_engine_active",  # DCGM_FI_PROF_GR_ENGINE_ACTIVE, ratio
    1002: "sm_active",  # DCGM_FI_PROF_SM_ACTIVE, ratio
    1003: "sm_occupancy",  # DCGM_FI_PROF_SM_OCCUPANCY, ratio
    1004: "pipe_tensor_active",  # DCGM_FI_PROF_PIPE_TENSOR_ACTIVE, ratio
    1005: "dram_active",  # DCGM_FI_PROF_DRAM_ACTIVE, ratio
    1009: "pcie_tx_bytes",  # DCGM_FI_PROF_PCIE_TX_BYTES, bytes/s
    1010: "pcie_rx_bytes",  # DCGM_FI_PROF_PCIE_RX_BYTES, bytes/s
}
BINDING_DIRS = (
    "/usr/local/dcgm/bindings/python3",
    "/usr/share/datacenter-gpu-manager-4/bindings/python3",
)
_UPDATE_US = 1_000_000  # DCGM samples the monitors every second
_KEEP_S = 60.0
# DCGM's "blank" sentinels start here (DCGM_FP64_BLANK = 2**47; the int64 ones are larger)
_BLANK_LIMIT = 140737488355328.0


def _import_bindings(dirs: tuple[str, ...] = BINDING_DIRS) -> Any | None:
    """``pydcgm`` with its ``dcgm_structs``, or None when DCGM's bindings are not installed."""
    for d in ("", *dirs):
        if d and (not Path(d).is_dir() or d in sys.path):
            continue
        if d:
            sys.path.append(d)
        try:
            pydcgm = importlib.import_module("pydcgm")
            structs = importlib.import_module("dcgm_structs")
        except Exception:  # ImportError, or bindings that fail to load their library
            continue
        return _Bindings(pydcgm, structs)
    return None


class _Bindings:
    def __init__(self, pydcgm: Any, structs: Any) -> None:
        self.pydcgm = pydcgm
        self.structs = structs


class DcgmProfiling:
    """DCGM's profiling fields per GPU, by UUID, from a DCGM host engine (``nv-hostengine``).

    ``bindings`` is a pydcgm-like module pair (tests hand over a fake); ``open`` imports DCGM's.
    """

    def __init__(self, bindings: Any, address: str = "127.0.0.1") -> None:
        pydcgm, structs = bindings.pydcgm, bindings.structs
        mode = getattr(structs, "DCGM_OPERATION_MODE_AUTO", 1)
        self.handle = pydcgm.DcgmHandle(ipAddress=address, opMode=mode)
        default = getattr(structs, "DCGM_GROUP_DEFAULT", 0)
        self.group = pydcgm.DcgmGroup(self.handle, groupName="gpufleet", groupType=default)
        self.fields = pydcgm.DcgmFieldGroup(
            self.handle, name="gpufleet-prof", fieldIds=list(PROF_FIELD_IDS)
        )
        self.group.samples.WatchFields(self.fields, _UPDATE_US, _KEEP_S, 0)
        self.uuid_of: dict[int, str] = {}
        system = self.handle.GetSystem()
        for gpu_id in self.group.GetGpuIds():
            try:
                attrs = system.discovery.GetGpuAttributes(gpu_id)
                self.uuid_of[int(gpu_id)] = _text(attrs.identifiers.uuid)
            except Exception as e:  # a GPU DCGM cannot describe: matched by index instead
                log.debug("DCGM attributes of GPU %s: %s", gpu_id, e)

    @classmethod
    def open(cls, address: str = "127.0.0.1", bindings: Any | None = None) -> DcgmProfiling | None:
        """The profiler, or None when DCGM is not installed or its host engine is unreachable."""
        b = bindings if bindings is not None else _import_bindings()
        if b is None:
            log.info("DCGM is not installed: no DCGM_FI_PROF_* fields (NVML has none)")
            return None
        try:
            return cls(b, address)
        except Exception as e:  # no nv-hostengine, profiling unsupported, another tool holds it
            log.warning("DCGM profiling unavailable (%s): no DCGM_FI_PROF_* fields", e)
            return None

    def read(self) -> dict[str, dict[str, float]]:
        """GPU UUID (or ``"#<dcgm gpu id>"`` when unknown) → GpuSample field → latest value."""
        try:
            latest = self.group.samples.GetLatest(self.fields).values
        except Exception as e:
            log.debug("DCGM GetLatest failed: %s", e)
            return {}
        out: dict[str, dict[str, float]] = {}
        for gpu_id, by_field in _items(latest):
            values: dict[str, float] = {}
            for field_id, series in _items(by_field):
                name = PROF_FIELD_IDS.get(int(field_id))
                v = _latest_value(series)
                if name is not None and v is not None:
                    values[name] = v
            if values:
                out[self.uuid_of.get(int(gpu_id), f"#{int(gpu_id)}")] = values
        return out

    def close(self) -> None:
        for step in (
            lambda: self.group.samples.UnwatchFields(self.fields),
            self.fields.Delete,
            self.group.Delete,
            self.handle.Shutdown,
        ):
            try:
                step()
            except Exception as e:
                log.debug("DCGM close: %s", e)


def _items(m: Any) -> list[tuple[Any, Any]]:
    if isinstance(m, Mapping):
        return list(m.items())
    try:
        return list(m.items())
    except Exception:
        return []


def _latest_value(series: Any) -> float | None:
    """The newest non-blank number of a DCGM time series (a list of values with ``.value``)."""
    try:
        items = list(series.values) if hasattr(series, "values") else list(series)
    except Exception:
        return None
    for fv in reversed(items):
        if getattr(fv, "isBlank", False):
            continue
        v = getattr(fv, "value", fv)
        if type(v) is int or type(v) is float:
            if abs(v) >= _BLANK_LIMIT or v != v:
                continue
            return float(v)
    return None


def _text(v: Any) -> str:
    return v.decode(errors="replace") if isinstance(v, bytes) else str(v)


__all__ = ["PROF_FIELD_IDS", "DcgmProfiling"]
