"""The node's GPUs as NVML shows them: each physical GPU whole, or in MIG mode its MIG devices
in its place (numbered in NVML's order, so a node without MIG keeps NVML's indices)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from gpufleet.agent.nvml.calls import NvmlCalls, text
from gpufleet.agent.nvml.names import MIB, catalog_name, mig_profile
from gpufleet.api.schemas import GpuInfo
from gpufleet.model.catalog import find, mig_name

log = logging.getLogger(__name__)

_MIG_ENABLE = 1  # NVML_DEVICE_MIG_ENABLE (nvmlDeviceGetMigMode's current mode)


@dataclass
class Inventory:
    """What discovery found."""

    # the node's GPUs (index → handle, info): whole GPUs and MIG devices
    handles: dict[int, Any] = field(default_factory=dict)
    info: dict[int, GpuInfo] = field(default_factory=dict)
    # the physical GPUs (NVML index → handle, info as a whole GPU), MIG mode on or off
    phys: dict[int, Any] = field(default_factory=dict)
    phys_info: dict[int, GpuInfo] = field(default_factory=dict)
    parent_of: dict[int, int] = field(default_factory=dict)  # GPU → its physical GPU's index
    mig: dict[int, tuple[int, int]] = field(default_factory=dict)  # MIG device → (parent, k)
    gpu_instance: dict[int, int] = field(default_factory=dict)  # MIG device → GPU instance id


def discover(nv: NvmlCalls, said: set[str]) -> Inventory:
    """``said``: the UUIDs already logged about (no instances, no profile): said once, not at
    each registration."""
    count = nv.call(None, "nvmlDeviceGetCount") or 0
    inv = Inventory()
    extra = 0  # MIG devices before this GPU, less the GPUs they stand for
    for i in range(int(count)):
        h = nv.call(i, "nvmlDeviceGetHandleByIndex", i)
        if h is None:
            continue  # a GPU the driver cannot open now is a missing GPU
        whole = _whole(nv, i, h)
        if whole is None:
            continue
        inv.phys[i], inv.phys_info[i] = h, whole
        if not _mig_enabled(nv, i, h):
            idx = i + extra
            inv.handles[idx], inv.parent_of[idx] = h, i
            inv.info[idx] = whole.model_copy(update={"index": idx})
            continue
        found = _mig_devices(nv, i, h, whole, said)
        if not found and whole.uuid not in said:
            said.add(whole.uuid)
            log.warning(
                "GPU %d (%s) is in MIG mode with no MIG devices: it offers no GPU "
                "(create instances with nvidia-smi mig, or turn MIG mode off)",
                i,
                whole.uuid,
            )
        for n, (k, mh, info, gi) in enumerate(found):
            idx = i + extra + n
            inv.handles[idx], inv.parent_of[idx] = mh, i
            inv.info[idx] = info.model_copy(update={"index": idx})
            inv.mig[idx] = (i, k)
            if gi is not None:
                inv.gpu_instance[idx] = gi
        extra += len(found) - 1
    return inv


def _whole(nv: NvmlCalls, i: int, h: Any) -> GpuInfo | None:
    """Physical GPU ``i`` as a whole GPU (None: it has no UUID, so it cannot be named)."""
    uuid = nv.call(i, "nvmlDeviceGetUUID", h)
    if uuid is None:
        return None
    mem = nv.call(i, "nvmlDeviceGetMemoryInfo", h)
    memory_mib = int(mem.total // MIB) if mem is not None else 0
    name = nv.call(i, "nvmlDeviceGetName", h)
    pci = nv.call(i, "nvmlDeviceGetPciInfo", h)
    return GpuInfo(
        index=i,
        uuid=text(uuid),
        model=catalog_name(text(name), memory_mib) if name is not None else "unknown",
        name=text(name).strip() if name is not None else "",
        memory_mib=memory_mib,
        pci_bus_id=text(pci.busId) if pci is not None else "",
        pcie_gen=int(nv.call(i, "nvmlDeviceGetCurrPcieLinkGeneration", h) or 0),
        pcie_width=int(nv.call(i, "nvmlDeviceGetCurrPcieLinkWidth", h) or 0),
        nvlink_up=nvlink_up(nv, h),
    )


def _mig_enabled(nv: NvmlCalls, i: int, h: Any) -> bool:
    """The GPU's current MIG mode (a pending change counts once the GPU is reset). An old
    driver or module without the call, or a GPU without MIG: off."""
    got = nv.call(i, "nvmlDeviceGetMigMode", h)  # [current, pending]
    if got is None:
        return False
    current = got[0] if isinstance(got, list | tuple) else got
    return int(current) == nv.const("NVML_DEVICE_MIG_ENABLE", _MIG_ENABLE)


def _mig_devices(
    nv: NvmlCalls, i: int, h: Any, parent: GpuInfo, said: set[str]
) -> list[tuple[int, Any, GpuInfo, int | None]]:
    """GPU ``i``'s MIG devices: (MIG index, handle, info, GPU instance id). An index without
    a device (NOT_FOUND: the slots are sparse) or whose UUID cannot be read is skipped."""
    top = int(nv.call(i, "nvmlDeviceGetMaxMigDeviceCount", h) or 0)
    catalog = find(parent.model)
    parent_gb = catalog.memory_gib if catalog is not None else 0.0
    out = []
    for k in range(top):
        mh = nv.call(i, "nvmlDeviceGetMigDeviceHandleByIndex", h, k)
        if mh is None:
            continue
        d = (i, k)
        uuid = nv.call(d, "nvmlDeviceGetUUID", mh)
        if uuid is None:
            continue
        mem = nv.call(d, "nvmlDeviceGetMemoryInfo", mh)
        memory_mib = int(mem.total // MIB) if mem is not None else 0
        profile = _profile(nv.call(d, "nvmlDeviceGetAttributes", mh), memory_mib, parent, parent_gb)
        if not profile and text(uuid) not in said:  # once, not each register
            said.add(text(uuid))
            log.warning("MIG device %d of GPU %d: no profile (NVML gave no attributes)", k, i)
        gi = nv.call(d, "nvmlDeviceGetGpuInstanceId", mh)
        info = GpuInfo(
            index=i,  # renumbered by discover
            uuid=text(uuid),
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


def _profile(attrs: Any, memory_mib: int, parent: GpuInfo, parent_gb: float) -> str:
    """A MIG device's profile from its attributes ("" when NVML gave none)."""
    if attrs is None:
        return ""
    size = int(getattr(attrs, "memorySizeMB", 0)) or memory_mib
    slices = int(getattr(attrs, "gpuInstanceSliceCount", 0))
    return mig_profile(slices, size, parent.memory_mib, parent_gb) if slices else ""


def nvlink_up(nv: NvmlCalls, h: Any) -> int:
    enabled = nv.const("NVML_FEATURE_ENABLED", 1)
    up = 0
    for link in range(nv.const("NVML_NVLINK_MAX_LINKS", 18)):
        fn = getattr(nv.nv, "nvmlDeviceGetNvLinkState", None)
        if fn is None:
            break
        try:
            state = fn(h, link)
        except Exception:  # past the last link, or no NVLink at all
            break
        up += int(state == enabled)
    return up
