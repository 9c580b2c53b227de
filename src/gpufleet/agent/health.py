"""Node health from GPU samples: GPUs expected vs found, critical XIDs, double-bit ECC, heat,
NVLink down. XIDs are events, so a GPU that logged a critical one stays bad until the agent
restarts or the heal loop resets the GPUs (the reset the XID asked for); the other checks read
the current sample."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpufleet.agent.gpu import GpuSample
from gpufleet.api.schemas import GpuInfo, Health

# NVIDIA's XIDs after which the GPU is lost or needs a reset (docs.nvidia.com/deploy/xid-errors;
# the "RESET_GPU"/"RESTART_BM" buckets of the catalog). Application faults (13, 31, 43, 45)
# are absent: they end a job, not a GPU.
CRITICAL_XIDS: dict[int, str] = {
    48: "double-bit ECC error (DBE)",
    62: "internal micro-controller halt",
    63: "ECC page retirement or row remap recorded: reset to apply",
    64: "ECC page retirement or row remap recording failure",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error: reset needed",
    95: "uncontained ECC error: reset needed",
    119: "GSP RPC timeout",
    120: "GSP error",
    121: "C2C (chip-to-chip) link error",
    123: "SPI PMU RPC write failure",
    140: "unrecovered ECC error",
    154: "GPU recovery action changed: reset or reboot required",
}


@dataclass(frozen=True, slots=True)
class HealthLimits:
    temp_max_c: float = 90.0  # above: unhealthy (H100/A100 slow down at about 87 °C)
    max_dbe: int = 0  # volatile double-bit errors tolerated


class HealthChecker:
    """Remembers the GPUs discovered at start and the critical XIDs seen since."""

    def __init__(
        self,
        baseline: Sequence[GpuInfo],
        limits: HealthLimits = HealthLimits(),
        expected_gpus: int | None = None,
    ) -> None:
        self.baseline = {g.index: g for g in baseline}
        self.expected = len(baseline) if expected_gpus is None else expected_gpus
        self.limits = limits
        self.xids: dict[int, list[int]] = {}  # GPU → critical XIDs seen
        self.last_xid: dict[int, int] = {}  # GPU → last XID of any kind (the dcgm gauge)

    def forget_xids(self) -> None:
        """After a GPU reset (the heal loop's): the XIDs seen before it are cured; a GPU that
        logs one again is bad again."""
        self.xids = {}  # rebound, not cleared: a check on another thread reads the old one

    def check(self, samples: Sequence[GpuSample]) -> Health:
        why: list[str] = []
        bad: set[int] = set()
        seen = {s.index for s in samples}
        missing = sorted(set(self.baseline) - seen)
        if len(seen) < self.expected:
            if missing:
                why.append(f"GPU {_list(missing)} missing (fell off the bus?)")
            else:
                why.append(f"{len(seen)} of {self.expected} expected GPUs found")
            bad.update(missing)
        for s in samples:
            if s.xid_errors:
                self.last_xid[s.index] = s.xid_errors[-1]
            crit = [x for x in s.xid_errors if x in CRITICAL_XIDS]
            if crit:
                self.xids.setdefault(s.index, []).extend(crit)
        for gpu, xids in sorted(self.xids.items()):
            x = xids[-1]
            why.append(f"GPU {gpu}: XID {x} ({CRITICAL_XIDS[x]})")
            bad.add(gpu)
        for s in samples:
            if s.ecc_dbe_vol_total is not None and s.ecc_dbe_vol_total > self.limits.max_dbe:
                why.append(f"GPU {s.index}: {s.ecc_dbe_vol_total} double-bit ECC errors")
                bad.add(s.index)
            if s.gpu_temp is not None and s.gpu_temp > self.limits.temp_max_c:
                why.append(
                    f"GPU {s.index}: {s.gpu_temp:.0f} °C over the {self.limits.temp_max_c:.0f} °C"
                    " limit"
                )
                bad.add(s.index)
            base = self.baseline.get(s.index)
            if base and s.nvlink_up is not None and s.nvlink_up < base.nvlink_up:
                why.append(f"GPU {s.index}: NVLink {s.nvlink_up} of {base.nvlink_up} links up")
                bad.add(s.index)
        if not why:
            return Health()
        return Health(healthy=False, why="; ".join(why), bad_gpus=sorted(bad))


def _list(xs: Sequence[int]) -> str:
    return ", ".join(str(x) for x in xs)
