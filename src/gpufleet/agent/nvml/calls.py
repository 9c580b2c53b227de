"""NVML's calls, guarded: a call the device does not support, or that fails, answers None (a
monitoring read never stops the agent); one that answered NOT_SUPPORTED is not asked again for
that device (a real H200 answers so to the retired-page calls every time); a device whose calls
answer "GPU is lost" is remembered as lost. And the readers of what NVML's structures hold."""

from __future__ import annotations

import logging
from collections.abc import Hashable
from typing import Any

from gpufleet.agent.gpu import GpuUnavailable

log = logging.getLogger(__name__)

_GPU_IS_LOST = 15  # NVML_ERROR_GPU_IS_LOST, when the module lacks the constant
_NOT_SUPPORTED = 3  # NVML_ERROR_NOT_SUPPORTED, likewise


def import_pynvml() -> Any:
    try:
        import pynvml  # type: ignore[import-untyped]  # deferred: simulating needs no NVML
    except ImportError as e:
        raise GpuUnavailable(
            "NVML: nvidia-ml-py is not installed (pip install nvidia-ml-py), "
            "or run the agent with --simulate"
        ) from e
    return pynvml


def text(v: Any) -> str:
    return v.decode(errors="replace") if isinstance(v, bytes) else str(v)


class NvmlCalls:
    """``nv``: a pynvml-like module. A device (``gpu``): a physical GPU's NVML index, or
    (parent, MIG index) for a MIG device; None for calls about no device."""

    def __init__(self, nv: Any) -> None:
        self.nv = nv
        self.lost: set[Hashable] = set()
        # (device, call, its arguments after the handle) that answered NOT_SUPPORTED: a
        # property of the device (an H200 has no retired pages), not asked again every sample
        self.unsupported: set[tuple[Hashable, str, str]] = set()

    def call(self, gpu: Hashable | None, name: str, *args: Any) -> Any:
        fn = getattr(self.nv, name, None)
        if fn is None:  # an older nvidia-ml-py without this function
            return None
        key = (gpu, name, repr(args[1:])) if gpu is not None else None
        if key is not None and key in self.unsupported:
            return None
        try:
            return fn(*args)
        except Exception as e:  # NVMLError above all; nothing here may crash the agent
            code = getattr(e, "value", None)
            if gpu is not None and code == self.const("NVML_ERROR_GPU_IS_LOST", _GPU_IS_LOST):
                self.lost.add(gpu)
            if key is not None and code == self.const("NVML_ERROR_NOT_SUPPORTED", _NOT_SUPPORTED):
                self.unsupported.add(key)
                log.debug("NVML %s%s is not supported on GPU %s", name, args[1:], gpu)
            else:
                log.debug("NVML %s%s failed: %s", name, args[1:], e)
            return None

    def const(self, name: str, default: int) -> int:
        return int(getattr(self.nv, name, default))


def num(obj: Any, attr: str) -> float | None:
    return float(getattr(obj, attr)) if obj is not None else None


def opt_int(v: Any) -> int | None:
    return int(v) if v is not None else None


def opt_float(v: Any) -> float | None:
    return float(v) if v is not None else None


def item(t: Any, k: int) -> int | None:
    return int(t[k]) if t is not None and len(t) > k else None


# nvmlValueType_t → the c_nvmlValue_t union member that holds it
_VALUE_MEMBERS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal"}


def field_value(fv: Any) -> int | None:
    if getattr(fv, "nvmlReturn", 0) != 0:
        return None
    member = _VALUE_MEMBERS.get(int(getattr(fv, "valueType", 3)), "ullVal")
    v = getattr(fv.value, member, None)
    return int(v) if v is not None else None
