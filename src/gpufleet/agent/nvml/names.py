"""The GPU catalog's names for what NVML reports: a device's model from its NVML name and memory,
a MIG device's profile from its slices and memory."""

from __future__ import annotations

import math

from gpufleet.model.catalog import GPU_MODELS, GpuModel, find

MIB = 1 << 20
_VENDOR_WORDS = frozenset({"NVIDIA", "TESLA", "QUADRO", "AMD"})
_MEMORY_TOLERANCE = 0.15  # NVML reports a little less than the marketing size
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
