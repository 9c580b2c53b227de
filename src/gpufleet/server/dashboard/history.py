"""GPU metrics over time for the dashboard's node pages: a bounded ring per node, fed from the
heartbeats (``ControllerService.on_heartbeat``). Memory is preallocated per node and never
grows: ``capacity`` samples × GPUs × ``METRICS`` float32 values (360 × 8 × 4 × 4 B ≈ 46 KiB a
node, about 46 MiB for 1,000 nodes). A missing value (a field the GPU does not report, a GPU
absent from one sample) is NaN here and ``null`` in JSON."""

from __future__ import annotations

import math
from array import array
from typing import Any

METRICS = (
    "DCGM_FI_DEV_GPU_UTIL",  # %
    "DCGM_FI_DEV_GPU_TEMP",  # °C
    "DCGM_FI_DEV_POWER_USAGE",  # W
    "DCGM_FI_DEV_FB_USED",  # MiB
)
MAX_GPUS = 64  # a heartbeat naming a larger index is not a GPU we chart
NAN = math.nan


class NodeRing:
    """The last ``capacity`` samples of one node: a time each, and GPUs × METRICS values."""

    def __init__(self, capacity: int, gpus: int) -> None:
        self.capacity = capacity
        self.gpus = gpus
        self.width = gpus * len(METRICS)
        self.times = array("d", [0.0]) * capacity
        self.values = array("f", [NAN]) * (capacity * self.width)
        self.count = 0  # samples held
        self.next = 0  # the slot the next sample takes

    def add(self, t: float, per_gpu: dict[int, list[float]]) -> None:
        slot = self.next
        self.times[slot] = t
        base = slot * self.width
        for g in range(self.gpus):
            row = per_gpu.get(g)
            for m in range(len(METRICS)):
                self.values[base + g * len(METRICS) + m] = NAN if row is None else row[m]
        self.next = (slot + 1) % self.capacity
        self.count = min(self.count + 1, self.capacity)

    def slots(self) -> list[int]:
        """Oldest first."""
        start = (self.next - self.count) % self.capacity
        return [(start + i) % self.capacity for i in range(self.count)]

    @property
    def last_time(self) -> float | None:
        return self.times[(self.next - 1) % self.capacity] if self.count else None


def _num(v: Any) -> float:
    return float(v) if type(v) in (int, float) and math.isfinite(v) else NAN


def _out(v: float) -> float | None:
    return None if math.isnan(v) else round(v, 1)


class MetricsHistory:
    def __init__(self, capacity: int = 360, min_interval_s: float = 0.0) -> None:
        self.capacity = capacity
        self.min_interval_s = min_interval_s  # heartbeats closer than this are not kept
        self.rings: dict[str, NodeRing] = {}

    def record(self, node: str, t: float, metrics: Any) -> None:
        """One heartbeat's ``metrics`` body (``{"gpus": [{"labels", "values"}, ...]}``);
        anything malformed in it is skipped, never raised: a heartbeat must not fail here."""
        ring = self.rings.get(node)
        last = ring.last_time if ring is not None else None
        if last is not None and t - last < self.min_interval_s:
            return
        gpus = metrics.get("gpus") if isinstance(metrics, dict) else None
        per_gpu: dict[int, list[float]] = {}
        for g in gpus if isinstance(gpus, list) else []:
            if not isinstance(g, dict):
                continue
            labels, values = g.get("labels"), g.get("values")
            idx = str(labels.get("gpu", "")) if isinstance(labels, dict) else ""
            if (
                not (idx.isascii() and idx.isdigit())
                or int(idx) >= MAX_GPUS
                or not isinstance(values, dict)
            ):
                continue
            per_gpu[int(idx)] = [_num(values.get(m)) for m in METRICS]
        need = max(per_gpu, default=-1) + 1
        if ring is None or need > ring.gpus:  # first sample, or more GPUs than before
            ring = self.rings[node] = NodeRing(self.capacity, max(need, 1))
        ring.add(t, per_gpu)

    def series(self, node: str, since: float | None = None) -> dict[str, Any]:
        """``{"times": [...], "series": {metric: {gpu: [value, ...]}}}``, oldest first; only
        the samples after ``since`` when given."""
        ring = self.rings.get(node)
        if ring is None:
            return {"times": [], "series": {m: {} for m in METRICS}}
        slots = [s for s in ring.slots() if since is None or ring.times[s] > since]
        out: dict[str, dict[str, list[float | None]]] = {m: {} for m in METRICS}
        n = len(METRICS)
        for g in range(ring.gpus):
            for m, name in enumerate(METRICS):
                vals = [ring.values[s * ring.width + g * n + m] for s in slots]
                if any(not math.isnan(v) for v in vals):
                    out[name][str(g)] = [_out(v) for v in vals]
        return {"times": [ring.times[s] for s in slots], "series": out}
