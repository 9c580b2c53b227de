"""What-if on a history: the same jobs replayed on a changed cluster or profile, and the deltas.

A change is ``KEY OP VALUE``:

- ``nodes+=N`` / ``nodes-=N`` / ``nodes=N``: N more nodes, copies of the cluster's last node
  (its model, GPUs, CPUs, memory, leaf and pod; named ``whatif-0000``, …), N fewer (the last
  ones), or exactly N (as many copies or removals as that takes);
- ``order=NAME``, ``placement=NAME``, ``backfill=NAME``, ``admit=NAME``: another plugin;
- ``preempt=A,B`` (or ``preempt=none``): other preemption plugins.

All changes apply together, to one scenario, compared with the baseline (the history replayed
as it is given). Both runs share the jobs, time limits and seed, so the deltas are the changes'.

Cost, per run (a cluster is paid for whether its GPUs are busy or not):

- cluster GPU-hours = the cluster's GPUs × makespan (the first submission to the last end);
- allocated GPU-hours = GPU-seconds held by jobs (work redone after a preemption or a node loss
  included), idle GPU-hours = cluster − allocated;
- cost = cluster GPU-hours × a flat price per GPU-hour (``--gpu-hour-price``, USD; the GPU
  catalog has no prices, and what a GPU-hour costs depends on the site, not the model alone).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from gpufleet.model.cluster import ClusterSpec, NodeSpec
from gpufleet.model.errors import SpecError
from gpufleet.sim.metrics import ReplayMetrics
from gpufleet.sim.replay import ProfileChoice, ReplayRun, check_profile

PLUGIN_KEYS = {"order": "order", "placement": "placement", "backfill": "backfill", "admit": "admit"}
KEYS = ("nodes", *PLUGIN_KEYS, "preempt")
# the figures a what-if compares: key in ReplayMetrics, label, unit, whether lower is better
FIGURES = (
    ("avg_jct_s", "avg JCT", "s", True),
    ("p95_jct_s", "p95 JCT", "s", True),
    ("avg_wait_s", "avg wait", "s", True),
    ("p95_wait_s", "p95 wait", "s", True),
    ("utilization", "utilization", "", False),
    ("makespan_s", "makespan", "s", True),
    ("preemptions", "preemptions", "", True),
)
# the cost figures (see cost_figures), same layout
COST_FIGURES = (
    ("cluster_gpu_hours", "GPU-hours (cluster)", "GPU-h", True),
    ("allocated_gpu_hours", "GPU-hours allocated", "GPU-h", True),
    ("idle_gpu_hours", "GPU-hours idle", "GPU-h", True),
    ("cost_usd", "cost", "USD", True),
)
# a flat, round default in the range of on-demand A100 prices; a site sets its own
DEFAULT_GPU_HOUR_PRICE_USD = 2.0
_CHANGE = re.compile(r"\s*([a-z_]+)\s*(\+=|-=|=)\s*(.*?)\s*")


@dataclass(frozen=True, slots=True)
class Change:
    key: str
    op: str  # "=", "+=" or "-="
    value: str

    @property
    def text(self) -> str:
        return f"{self.key}{self.op}{self.value}"


def parse_change(text: str) -> Change:
    m = _CHANGE.fullmatch(text)
    if not m:
        raise SpecError(f"expected KEY=VALUE, nodes+=N or nodes-=N, got {text!r}", field="--change")
    key, op, value = m[1], m[2], m[3]
    if key not in KEYS:
        raise SpecError(f"{text!r}: the key must be one of {', '.join(KEYS)}", field="--change")
    if op != "=" and key != "nodes":
        raise SpecError(f"{text!r}: only nodes takes += and -=", field="--change")
    if not value:
        raise SpecError(f"{text!r}: no value", field="--change")
    if key == "nodes" and not value.isdigit():
        raise SpecError(f"{text!r}: the number of nodes must be a whole number", field="--change")
    return Change(key, op, value)


def apply_changes(
    cluster: ClusterSpec, choice: ProfileChoice, changes: Sequence[Change]
) -> tuple[ClusterSpec, ProfileChoice]:
    for c in changes:
        if c.key == "nodes":
            n, now = int(c.value), len(cluster.nodes)
            target = {"=": n, "+=": now + n, "-=": now - n}[c.op]
            cluster = resize(cluster, target, c.text)
        elif c.key == "preempt":
            names = tuple(x.strip() for x in c.value.split(",") if x.strip() not in ("", "none"))
            choice = replace(choice, preempt=names)
        else:
            choice = replace(choice, **{PLUGIN_KEYS[c.key]: c.value})  # type: ignore[arg-type]
    try:
        check_profile(choice)
    except SpecError as e:
        raise SpecError(e.reason, field="--change") from None
    return cluster, choice


def resize(cluster: ClusterSpec, nodes: int, why: str) -> ClusterSpec:
    if nodes < 1:
        raise SpecError(
            f"{why!r} leaves {nodes} nodes of {len(cluster.nodes)}; at least 1 must remain",
            field="--change",
        )
    have = list(cluster.nodes)
    if nodes <= len(have):
        return replace(cluster, nodes=tuple(have[:nodes]))
    last = have[-1]
    taken = {n.name for n in have}
    extra: list[NodeSpec] = []
    i = 0
    while len(have) + len(extra) < nodes:
        name = f"whatif-{i:04d}"
        i += 1
        if name not in taken:
            extra.append(replace(last, name=name))
    return replace(cluster, nodes=tuple(have + extra))


@dataclass(frozen=True, slots=True)
class Delta:
    key: str
    label: str
    unit: str
    baseline: float | None
    whatif: float | None
    lower_is_better: bool

    @property
    def delta(self) -> float | None:
        if self.baseline is None or self.whatif is None:
            return None
        return self.whatif - self.baseline

    @property
    def delta_pct(self) -> float | None:
        d = self.delta
        if d is None or not self.baseline:
            return None
        return 100.0 * d / abs(self.baseline)

    @property
    def better(self) -> bool | None:
        d = self.delta
        if d is None or d == 0:
            return None
        return (d < 0) == self.lower_is_better

    def to_json(self) -> dict[str, object]:
        def r(v: float | None) -> float | None:
            return None if v is None else round(v, 6)

        return {
            "baseline": r(self.baseline),
            "whatif": r(self.whatif),
            "delta": r(self.delta),
            "delta_pct": r(self.delta_pct),
            "better": self.better,
        }


def check_price(price: float) -> float:
    if not (math.isfinite(price) and price >= 0):
        raise SpecError(
            f"must be a price in USD of at least 0, got {price:g}", field="--gpu-hour-price"
        )
    return price


def cost_figures(m: ReplayMetrics, price: float) -> dict[str, float]:
    """The run's GPU-hours (cluster, allocated, idle) and what the cluster's cost."""
    cluster = m.gpus * m.makespan_s / 3600
    allocated = sum(q.gpu_seconds for q in m.queues.values()) / 3600
    return {
        "cluster_gpu_hours": cluster,
        "allocated_gpu_hours": allocated,
        # a fractional share rounded up can make allocated a hair above the cluster's
        "idle_gpu_hours": max(0.0, cluster - allocated),
        "cost_usd": cluster * price,
    }


def deltas(
    base: ReplayMetrics, new: ReplayMetrics, price: float = DEFAULT_GPU_HOUR_PRICE_USD
) -> list[Delta]:
    """The scheduling figures, then the cost figures, baseline against what-if."""
    out = []
    for key, label, unit, lower in FIGURES:
        a, b = getattr(base, key), getattr(new, key)
        out.append(
            Delta(
                key,
                label,
                unit,
                None if a is None else float(a),
                None if b is None else float(b),
                lower,
            )
        )
    ca, cb = cost_figures(base, price), cost_figures(new, price)
    for key, label, unit, lower in COST_FIGURES:
        out.append(Delta(key, label, unit, ca[key], cb[key], lower))
    return out


@dataclass(frozen=True, slots=True)
class WhatIf:
    """A what-if's two runs and what it is shown with; one source for ``--json`` and the report."""

    history: str  # the history file's name
    jobs: int
    changes: tuple[Change, ...]
    before: ReplayRun
    after: ReplayRun
    baseline_nodes: int
    whatif_nodes: int
    price: float

    @property
    def deltas(self) -> list[Delta]:
        return deltas(self.before.metrics, self.after.metrics, self.price)

    def to_json(self) -> dict[str, Any]:
        return {
            "changes": [c.text for c in self.changes],
            "baseline": self._side(self.before, self.baseline_nodes),
            "whatif": self._side(self.after, self.whatif_nodes),
            "gpu_hour_price_usd": self.price,
            "deltas": {d.key: d.to_json() for d in self.deltas},
        }

    @staticmethod
    def _side(run: ReplayRun, nodes: int) -> dict[str, Any]:
        return {"profile": run.label, "nodes": nodes, "gpus": run.gpus}
