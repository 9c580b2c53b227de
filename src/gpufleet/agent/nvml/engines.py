"""A GPU's encoder sessions and each process's share of its engines, read from NVML. Absent
(None, or no processes) where the GPU has no such engine, where the driver does not say (an
older driver; a GPU in MIG mode, whose devices NVML cannot split per process), or where no
process has run on it since the last sample."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from gpufleet.agent.gpu import ProcessUse
from gpufleet.agent.nvml.calls import NvmlCalls
from gpufleet.model.engines import engines_of

# GPU → the newest per-process sample's timestamp (µs, NVML's clock) already read: the next
# read asks only for newer ones, so a process gone since is not reported again
SeenStamps = dict[Hashable, int]


def encoder_stats(
    nv: NvmlCalls, d: Hashable, h: Any, model: str
) -> tuple[int | None, float | None, float | None]:
    """Active NVENC sessions, their moving average frames/s and latency (µs); all None where
    the GPU has no NVENC (the catalog says so) or the driver does not answer."""
    if engines_of(model).nvenc == 0:
        return None, None, None
    got = nv.call(d, "nvmlDeviceGetEncoderStats", h)  # (sessionCount, averageFps, averageLatency)
    if got is None or len(got) < 3:
        return None, None, None
    return int(got[0]), float(got[1]), float(got[2])


def process_use(
    nv: NvmlCalls, d: Hashable, h: Any, model: str, seen: SeenStamps
) -> tuple[ProcessUse, ...]:
    """Each process's latest share of the SM, memory, encoder and decoder since the previous
    read (nvmlDeviceGetProcessUtilization); an engine the GPU lacks is None."""
    got = nv.call(d, "nvmlDeviceGetProcessUtilization", h, seen.get(d, 0))
    if not got:  # NVML_ERROR_NOT_FOUND: no process sampled since then
        return ()
    e = engines_of(model)
    latest: dict[int, Any] = {}
    for s in got:
        pid = int(getattr(s, "pid", 0))
        if pid and (pid not in latest or s.timeStamp > latest[pid].timeStamp):
            latest[pid] = s
    if latest:
        seen[d] = max(int(s.timeStamp) for s in latest.values())
    return tuple(
        ProcessUse(
            pid=pid,
            sm=float(s.smUtil),
            mem=float(s.memUtil),
            # an engine the catalog says the model lacks is absent; one it does not know, as said
            enc=float(s.encUtil) if e.nvenc != 0 else None,
            dec=float(s.decUtil) if e.nvdec != 0 else None,
        )
        for pid, s in sorted(latest.items())
    )
