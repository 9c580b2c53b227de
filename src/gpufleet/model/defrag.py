"""The bounds on defragmentation (``preempt/defrag``, ADR 0045): which gangs it moves jobs for,
how often it may act, how much work one move may throw away, and the savings-versus-disruption
score a move must reach (Karpenter's consolidation acts at >= 0.5).

The cluster's policy is the plugin's options (``gpufleet serve --defrag KEY=VALUE,...``,
``Profile.build(options={"preempt/defrag": {...}})``); a queue may override any of its fields
for the gangs of that queue (``defrag:`` in the queues' YAML), as ``preempt_grace_max_s`` is
set per queue. Pure data: the scheduler (``scheduler/defrag.py``) applies it.

Definitions (GPU-seconds throughout):

- savings = the gang's GPUs x min(``savings_horizon_s``, its expected wait without the move),
  the expected wait being the time until the running jobs' time limits would leave some leaf
  able to hold it (a job without a time limit never ends there: the horizon);
- disruption = for each victim, the work since its last checkpoint plus ``restart_cost_s`` per
  GPU it holds (a requeued job's start-up, paid even with a checkpoint);
- score = savings / (savings + disruption), 0 when nothing is saved.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from gpufleet.model.validate import Fields

# (minimum, maximum) of each number; a bool field has none
_RANGES: dict[str, tuple[float, float]] = {
    "min_gang_gpus": (1, 1 << 20),
    "max_lost_gpu_s": (0.0, 1e12),
    "min_score": (0.0, 1.0),
    "savings_horizon_s": (1e-9, 1e9),
    "restart_cost_s": (0.0, 1e9),
    "interval_s": (0.0, 1e9),
    "leaf_interval_s": (0.0, 1e9),
}


@dataclass(frozen=True, slots=True)
class DefragPolicy:
    enabled: bool = True  # a queue may turn it off for its gangs
    min_gang_gpus: int = 8  # smaller jobs fit in the gaps: no one is moved for them
    max_lost_gpu_s: float = 4 * 3600.0  # work since the victims' checkpoints one move may lose
    min_score: float = 0.5
    savings_horizon_s: float = 3600.0  # the most wait a move is credited with saving
    restart_cost_s: float = 300.0
    # move only jobs that fit elsewhere now (outside the leaf, on free devices: Karpenter's
    # precondition for consolidation); CPU and memory are not counted. Off, on a Philly slice
    # every job's mean wait rose 2.5x (the moved jobs waited behind the gangs): BENCHMARKS.md
    room_elsewhere: bool = True
    # how often: at most one move in the cluster per interval_s, and per leaf per
    # leaf_interval_s (a leaf just freed is not churned again by the next gang)
    interval_s: float = 60.0
    leaf_interval_s: float = 600.0

    def __post_init__(self) -> None:
        bad = []
        for name, (lo, hi) in _RANGES.items():
            v = getattr(self, name)
            if not lo <= v <= hi:
                shown = "> 0" if name == "savings_horizon_s" else f"in [{lo:g}, {hi:g}]"
                bad.append(f"{name} must be {shown}, not {v}")
        if bad:
            raise ValueError("; ".join(bad))

    @staticmethod
    def of(options: Mapping[str, Any]) -> DefragPolicy:
        """A policy from loose options (the plugin's keyword arguments, ``key=value`` text):
        each coerced to its field's type; an unknown key is refused."""
        known = {f.name: f.type for f in fields(DefragPolicy)}
        unknown = sorted(set(options) - set(known))
        if unknown:
            raise ValueError(f"unknown defrag option(s): {', '.join(unknown)}")
        return replace(DefragPolicy(), **{k: _coerce(k, v) for k, v in options.items()})

    def overridden(self, changes: DefragOverrides | None) -> DefragPolicy:
        """This policy with a queue's changes (None: as it is)."""
        if changes is None or not changes.values:
            return self
        values: dict[str, Any] = dict(changes.values)
        return replace(self, **values)


@dataclass(frozen=True, slots=True)
class DefragOverrides:
    """A queue's changes to the cluster's defrag policy, the fields it names only."""

    values: tuple[tuple[str, float | int | bool], ...] = ()

    def to_dict(self) -> dict[str, float | int | bool]:
        return dict(self.values)

    @staticmethod
    def from_dict(raw: Any, *, source: str, path: str) -> DefragOverrides:
        f = Fields(raw, source=source, path=path)
        got: dict[str, float | int | bool] = {}
        for name in ("enabled", "room_elsewhere"):
            if f.has(name):
                got[name] = f.flag(name, True)
        if f.has("min_gang_gpus"):
            lo, hi = _RANGES["min_gang_gpus"]
            got["min_gang_gpus"] = f.integer("min_gang_gpus", 8, minimum=int(lo), maximum=int(hi))
        for name, (lo, hi) in _RANGES.items():
            if name != "min_gang_gpus" and f.has(name):
                got[name] = f.number(name, 0.0, minimum=lo, maximum=hi)
        f.finish()
        try:
            DefragPolicy(**dict[str, Any](got))
        except ValueError as e:
            raise f.error(next(iter(got), "defrag"), str(e)) from None
        return DefragOverrides(tuple(sorted(got.items())))


def _coerce(name: str, v: Any) -> Any:
    if name in ("enabled", "room_elsewhere"):
        if isinstance(v, str):
            low = v.strip().lower()
            if low not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError(f"defrag option {name}: true or false, not {v!r}")
            return low in ("true", "1", "yes")
        return bool(v)
    if name == "min_gang_gpus":
        return int(v)
    return float(v)


def parse_options(text: str) -> dict[str, str]:
    """``KEY=VALUE,KEY=VALUE`` (``gpufleet serve --defrag``) as a mapping; checked by
    ``DefragPolicy.of``."""
    out: dict[str, str] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        key, eq, value = part.partition("=")
        if not eq or not key.strip() or not value.strip():
            raise ValueError(f"defrag option {part!r}: write KEY=VALUE")
        out[key.strip()] = value.strip()
    return out
