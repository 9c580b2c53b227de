"""How close each queue's share of GPU-time came to its entitlement, window by window.

Pure: the simulator's metrics and the live accounting give it the jobs' spans and read the
figure. Per window (an hour by default), a queue has *demand* while it has jobs submitted and not
ended (pending or running); its demand is the mean GPUs those jobs asked for over the window.
Each queue with demand is *entitled* to its weighted max-min fair share of the cluster's GPUs
given every queue's demand (water-filling: a queue that wants less than its weight's part of what
is left gets what it wants; the rest is split among the others by weight), so an idle queue's
part goes to the busy ones and nobody is entitled to more than it asked for. Its ratio is the
GPU-time it received over the GPU-time it was entitled to. The window's figure is Jain's index
over those ratios, J = (Σ xᵢ)² / (n · Σ xᵢ²): 1 when every queue got the same fraction of its
entitlement, 1/n when one queue got everything. The run's figure is the mean over the windows in
which at least two queues had demand (with one, nothing can be unfair). Unlike Jain over mean
slowdowns, it does not punish a fair-share scheduler for slowing down a queue that asks for more
than its share.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported where the figure is computed: the controller starts without it
    import numpy as np

WINDOW_S = 3600.0


@dataclass(frozen=True, slots=True)
class Span:
    """One job as the figure sees it: its queue, GPUs, when it wanted them (submit to end,
    or to the horizon if it never ended) and when it held them (its attempts)."""

    queue: str
    gpus: float
    submit: float
    end: float | None
    runs: Sequence[tuple[float, float]]  # (start, end) of each attempt


@dataclass(frozen=True, slots=True)
class EntitlementFairness:
    jain: float | None  # mean over the windows with two or more demanding queues
    windows: int  # how many such windows
    # per queue, over those windows: GPU-time received ÷ GPU-time entitled
    ratio: Mapping[str, float]


def water_fill(
    capacity: float, demand: Mapping[str, float], weight: Mapping[str, float]
) -> dict[str, float]:
    """Each queue's weighted max-min fair share of ``capacity`` given its ``demand``."""
    out: dict[str, float] = {}
    left = {q: d for q, d in demand.items() if d > 0}
    cap = capacity
    while left:
        total_w = sum(weight.get(q, 1.0) for q in left)
        fair = {q: cap * weight.get(q, 1.0) / total_w for q in left}
        sated = [q for q, d in left.items() if d <= fair[q]]
        if not sated:
            out.update(fair)
            break
        for q in sated:
            out[q] = left.pop(q)
            cap -= out[q]
    return out


def _integrals(intervals: Iterable[tuple[float, float, float]], edges: np.ndarray) -> np.ndarray:
    """∫ of the sum of the step functions (value v on [a, b)) over each window of ``edges``."""
    import numpy as np

    ts: list[float] = []
    dv: list[float] = []
    for a, b, v in intervals:
        if b > a and v:
            ts += (a, b)
            dv += (v, -v)
    if not ts:
        return np.zeros(len(edges) - 1)
    order = np.argsort(ts, kind="stable")
    t = np.asarray(ts)[order]
    rate = np.cumsum(np.asarray(dv)[order])  # the value from t[i] on
    area = np.concatenate(([0.0], np.cumsum(rate[:-1] * np.diff(t))))  # ∫ up to t[i]
    at = np.interp(edges, t, area, left=0.0, right=float(area[-1]))
    # between breakpoints the integral is linear, so interp is exact
    return np.diff(at)


def entitlement_fairness(
    spans: Sequence[Span],
    capacity_gpus: float,
    weights: Mapping[str, float],
    until: float,
    window_s: float = WINDOW_S,
    since: float = 0.0,
) -> EntitlementFairness:
    """The figure over ``[since, until)`` cut into windows of ``window_s``."""
    import numpy as np

    if until <= since or capacity_gpus <= 0:
        return EntitlementFairness(None, 0, {})
    edges = np.arange(since, until + window_s, window_s)
    edges[-1] = min(edges[-1], until) if len(edges) > 1 else until
    by_queue: dict[str, list[Span]] = {}
    for s in spans:
        by_queue.setdefault(s.queue, []).append(s)
    lengths = np.diff(edges)
    demand: dict[str, np.ndarray] = {}
    used: dict[str, np.ndarray] = {}
    for q, ss in by_queue.items():
        demand[q] = _integrals(
            ((s.submit, until if s.end is None else s.end, s.gpus) for s in ss), edges
        )
        used[q] = _integrals(((a, b, s.gpus) for s in ss for a, b in s.runs), edges)
    jains: list[float] = []
    got: dict[str, float] = {}
    owed: dict[str, float] = {}
    for w, length in enumerate(lengths.tolist()):
        if length <= 0:
            continue
        want = {q: float(d[w]) / length for q, d in demand.items() if d[w] > 1e-9}
        if len(want) < 2:
            continue
        fair = water_fill(capacity_gpus, want, weights)
        xs = []
        for q, e in fair.items():
            received = float(used[q][w]) / length
            xs.append(received / e)
            got[q] = got.get(q, 0.0) + received
            owed[q] = owed.get(q, 0.0) + e
        arr = np.asarray(xs)
        sq = float(np.sum(arr * arr))
        jains.append(1.0 if sq == 0 else float(np.sum(arr) ** 2 / (arr.size * sq)))
    ratio = {q: got[q] / owed[q] for q in sorted(owed) if owed[q] > 0}
    mean = float(np.mean(jains)) if jains else None
    return EntitlementFairness(mean, len(jains), ratio)
