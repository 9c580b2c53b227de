"""One physical GPU's sample, read from NVML: utilisation, memory, temperatures, power, clocks,
ECC and retired pages, remapped rows, throttle reasons, NVLink traffic, vGPU licence. Every
read goes through the guarded calls: what a device does not support stays None."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from gpufleet.agent.gpu import GpuSample, engine_utils
from gpufleet.agent.nvml.calls import NvmlCalls, field_value, item, num, opt_float, opt_int
from gpufleet.agent.nvml.discovery import nvlink_up
from gpufleet.agent.nvml.engines import SeenStamps, encoder_stats, process_use
from gpufleet.agent.nvml.names import MIB
from gpufleet.api.schemas import GpuInfo

# NVML field ids (nvml.h) where the module lacks the constant
_FI_DEV_MEMORY_TEMP = 82
_GRID_LICENSE_LICENSED = 1  # NVML_GRID_LICENSE_STATE_LICENSED (featureState of a feature)

NvlinkCounters = dict[int, tuple[float, int, int]]  # GPU → (when, tx KiB, rx KiB) last read


def sample_whole(
    nv: NvmlCalls,
    i: int,
    h: Any,
    info: GpuInfo,
    now: float,
    xids: tuple[int, ...],
    counters: NvlinkCounters,
    seen: SeenStamps | None = None,
) -> GpuSample:
    """Physical GPU ``i`` (its NVML index) as a whole GPU; ``seen``: where its per-process
    samples were read up to (None: they are not read)."""
    c = nv.const
    util = nv.call(i, "nvmlDeviceGetUtilizationRates", h)
    power_mw = nv.call(i, "nvmlDeviceGetPowerUsage", h)
    vol = c("NVML_VOLATILE_ECC", 0)
    corrected = c("NVML_MEMORY_ERROR_TYPE_CORRECTED", 0)
    uncorrected = c("NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1)
    rows = nv.call(i, "nvmlDeviceGetRemappedRows", h)  # (corr, unc, pending, failure)
    tx, rx, nvlink_total = _nvlink_rates(nv, i, h, info, now, counters)
    used, free, reserved = memory(nv, i, h)
    enc, dec = engine_utils(
        info.model,
        item(nv.call(i, "nvmlDeviceGetEncoderUtilization", h), 0),
        item(nv.call(i, "nvmlDeviceGetDecoderUtilization", h), 0),
    )
    sessions, fps, latency = encoder_stats(nv, i, h, info.model)
    return GpuSample(
        index=i,
        uuid=info.uuid,
        model=info.model,
        name=info.name,
        pci_bus_id=info.pci_bus_id,
        gpu_util=num(util, "gpu"),
        mem_copy_util=num(util, "memory"),
        enc_util=enc,
        dec_util=dec,
        enc_sessions=sessions,
        enc_fps=fps,
        enc_latency_us=latency,
        processes=process_use(nv, i, h, info.model, seen) if seen is not None else (),
        fb_used=used,
        fb_free=free,
        fb_reserved=reserved,
        gpu_temp=opt_float(nv.call(i, "nvmlDeviceGetTemperature", h, c("NVML_TEMPERATURE_GPU", 0))),
        memory_temp=_memory_temp(nv, i, h),
        power_usage=power_mw / 1000.0 if power_mw is not None else None,
        total_energy_consumption=opt_int(nv.call(i, "nvmlDeviceGetTotalEnergyConsumption", h)),
        sm_clock=opt_int(nv.call(i, "nvmlDeviceGetClockInfo", h, c("NVML_CLOCK_SM", 1))),
        mem_clock=opt_int(nv.call(i, "nvmlDeviceGetClockInfo", h, c("NVML_CLOCK_MEM", 2))),
        pcie_replay_counter=opt_int(nv.call(i, "nvmlDeviceGetPcieReplayCounter", h)),
        ecc_sbe_vol_total=opt_int(nv.call(i, "nvmlDeviceGetTotalEccErrors", h, corrected, vol)),
        ecc_dbe_vol_total=opt_int(nv.call(i, "nvmlDeviceGetTotalEccErrors", h, uncorrected, vol)),
        retired_sbe=_retired(
            nv, i, h, c("NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS", 0)
        ),
        retired_dbe=_retired(nv, i, h, c("NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR", 1)),
        retired_pending=opt_int(nv.call(i, "nvmlDeviceGetRetiredPagesPendingStatus", h)),
        correctable_remapped_rows=item(rows, 0),
        uncorrectable_remapped_rows=item(rows, 1),
        row_remap_pending=item(rows, 2),
        row_remap_failure=item(rows, 3),
        xid_errors=xids,
        clock_throttle_reasons=_throttle(nv, i, h),
        nvlink_bandwidth_total=nvlink_total,
        vgpu_license_status=_vgpu_license(nv, i, h),
        nvlink_tx_bytes=tx,
        nvlink_rx_bytes=rx,
        nvlink_up=nvlink_up(nv, h) if hasattr(nv.nv, "nvmlDeviceGetNvLinkState") else None,
    )


def memory(nv: NvmlCalls, d: Hashable, h: Any) -> tuple[int | None, int | None, int | None]:
    """Framebuffer MiB used, free and reserved by the driver. Memory info v2 splits out what
    the driver reserves (used then excludes it); without it, reserved is None."""
    mem = nv.call(d, "nvmlDeviceGetMemoryInfo", h)
    mem2 = _memory_v2(nv, d, h)
    if mem2 is not None:
        mem = mem2
    return (
        int(mem.used // MIB) if mem is not None else None,
        int(mem.free // MIB) if mem is not None else None,
        int(mem2.reserved // MIB) if getattr(mem2, "reserved", None) is not None else None,
    )


def _memory_v2(nv: NvmlCalls, d: Hashable, h: Any) -> Any:
    """NVML's memory info v2 (total = reserved + used + free), or None where unsupported."""
    version = getattr(nv.nv, "nvmlMemory_v2", None)
    if version is None:
        return None
    m = nv.call(d, "nvmlDeviceGetMemoryInfo", h, version)
    return m if getattr(m, "reserved", None) is not None else None


def _memory_temp(nv: NvmlCalls, i: int, h: Any) -> float | None:
    """The HBM's temperature (NVML's field NVML_FI_DEV_MEMORY_TEMP); GDDR boards have none."""
    fid = int(getattr(nv.nv, "NVML_FI_DEV_MEMORY_TEMP", _FI_DEV_MEMORY_TEMP))
    values = nv.call(i, "nvmlDeviceGetFieldValues", h, [fid])
    if not values:
        return None
    v = field_value(values[0])
    return float(v) if v is not None and v > 0 else None  # 0: the board has no sensor


def _vgpu_license(nv: NvmlCalls, i: int, h: Any) -> int | None:
    """1 when the GPU holds a vGPU licence, 0 when it can but does not; None where the GPU
    has no licensable features (bare metal without vGPU software: NVML_ERROR_NOT_SUPPORTED).
    """
    for name in (
        "nvmlDeviceGetGridLicensableFeatures_v4",
        "nvmlDeviceGetGridLicensableFeatures_v3",
        "nvmlDeviceGetGridLicensableFeatures",
    ):
        if hasattr(nv.nv, name):
            got = nv.call(i, name, h)
            break
    else:
        return None
    if got is None or not getattr(got, "isGridLicenseSupported", 0):
        return None
    count = int(getattr(got, "licensableFeaturesCount", 0))
    feats = list(getattr(got, "gridLicensableFeatures", ()))[:count]
    return int(any(getattr(f, "featureState", 0) == _GRID_LICENSE_LICENSED for f in feats))


def _retired(nv: NvmlCalls, i: int, h: Any, cause: int) -> int | None:
    pages = nv.call(i, "nvmlDeviceGetRetiredPages", h, cause)
    return len(pages) if pages is not None else None


def _throttle(nv: NvmlCalls, i: int, h: Any) -> int | None:
    # "clocks event reasons" is the new name of "clocks throttle reasons" (NVML 12.2+)
    for name in (
        "nvmlDeviceGetCurrentClocksEventReasons",
        "nvmlDeviceGetCurrentClocksThrottleReasons",
    ):
        if hasattr(nv.nv, name):
            return opt_int(nv.call(i, name, h))
    return None


def _nvlink_rates(
    nv: NvmlCalls, i: int, h: Any, info: GpuInfo, now: float, counters: NvlinkCounters
) -> tuple[float | None, float | None, int | None]:
    """Bytes/s from NVML's cumulative NVLink data counters (KiB), so the first is None,
    and the counters' sum in bytes (DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL)."""
    tx_id = getattr(nv.nv, "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX", None)
    rx_id = getattr(nv.nv, "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX", None)
    if tx_id is None or rx_id is None or not info.nvlink_up:
        return None, None, None
    values = nv.call(i, "nvmlDeviceGetFieldValues", h, [tx_id, rx_id])
    if values is None or len(values) < 2:
        return None, None, None
    tx, rx = (field_value(v) for v in values[:2])
    if tx is None or rx is None:
        return None, None, None
    total = (tx + rx) * 1024
    prev = counters.get(i)
    counters[i] = (now, tx, rx)
    if prev is None or now <= prev[0] or tx < prev[1] or rx < prev[2]:
        return None, None, total
    dt = now - prev[0]
    return (tx - prev[1]) * 1024 / dt, (rx - prev[2]) * 1024 / dt, total
