"""A queue's idle-GPU policy: when a running job's GPUs count as idle, when its user is warned,
and what is done once they have stayed idle too long.

The defaults are Princeton Research Computing's published rule for its GPU clusters: a job
whose GPUs sit at 0 % utilization is warned at 60 and 105 minutes and cancelled at 120. "Idle"
is judged on a sliding window (the mean utilization of the job's GPUs over ``window_s``), so a
job that computes in bursts is not caught between two of them; a ``threshold_pct`` above 1
makes it a low-efficiency rule. The utilization is the one /metrics shows
(DCGM_FI_DEV_GPU_UTIL from the nodes' agents), never what a job says of itself."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from gpufleet.model.validate import Fields

IdleAction = Literal["cancel", "requeue", "warn"]
ACTIONS: tuple[IdleAction, ...] = ("cancel", "requeue", "warn")
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([smhd]?)\s*$")
MAX_DURATION_S = 30 * 86400.0


@dataclass(frozen=True, slots=True)
class IdlePolicy:
    # idle while the job's mean GPU utilization over the window is under this (1: "0 %", as
    # DCGM reports whole percents)
    threshold_pct: float = 1.0
    warn_after_s: tuple[float, ...] = (3600.0, 6300.0)  # 60 and 105 minutes idle
    act_after_s: float = 7200.0  # 120 minutes idle
    action: IdleAction = "cancel"
    window_s: float = 300.0  # the sliding window the mean is taken over
    exempt: bool = False  # the whole queue is exempt (an interactive or debug queue)
    # the most idle time a job may ask to be spared (its spec's idle_exempt_s), counted on top
    # of act_after_s
    exempt_max_s: float = 4 * 3600.0
    # each idle GPU-second counts this many times more against the queue's fair share (its
    # decayed usage, on top of the allocation it is charged anyway); 0: not at all
    charge_idle: float = 0.0

    def act_at_s(self, asked_exempt_s: float) -> float:
        """How long a job that asked to be spared ``asked_exempt_s`` may sit idle before the
        action: its ask, capped by the queue's ``exempt_max_s``, on top of ``act_after_s``."""
        return self.act_after_s + min(max(asked_exempt_s, 0.0), self.exempt_max_s)

    def to_dict(self) -> dict[str, Any]:
        return {
            "threshold_pct": self.threshold_pct,
            "warn_after": list(self.warn_after_s),
            "act_after": self.act_after_s,
            "action": self.action,
            "window_s": self.window_s,
            "exempt": self.exempt,
            "exempt_max": self.exempt_max_s,
            "charge_idle": self.charge_idle,
        }

    @staticmethod
    def from_dict(raw: Any, *, source: str, path: str) -> IdlePolicy:
        f = Fields(raw, source=source, path=path)
        d = IdlePolicy()
        threshold = f.number("threshold_pct", d.threshold_pct, minimum=0.0, maximum=100.0)
        warns = d.warn_after_s
        if f.has("warn_after"):
            warns = tuple(duration(v, f, "warn_after") for v in _as_list(f.raw("warn_after"), f))
        act = duration(f.raw("act_after"), f, "act_after") if f.has("act_after") else d.act_after_s
        action = f.text("action", d.action)
        if action not in ACTIONS:
            raise f.error("action", f"must be one of {', '.join(ACTIONS)}, got {action!r}")
        window = f.number("window_s", d.window_s, minimum=0.0, maximum=MAX_DURATION_S)
        exempt = f.flag("exempt", False)
        most = d.exempt_max_s
        if f.has("exempt_max"):
            most = duration(f.raw("exempt_max"), f, "exempt_max")
        charge = f.number("charge_idle", 0.0, minimum=0.0, maximum=100.0)
        if any(w >= act for w in warns):
            raise f.error("warn_after", f"each warning must come before act_after ({act:g} s)")
        f.finish()
        return IdlePolicy(
            threshold, tuple(sorted(warns)), act, action, window, exempt, most, charge
        )


def _as_list(v: Any, f: Fields) -> list[Any]:
    if isinstance(v, list):
        return v
    if v is None:
        return []
    return [v]


def duration(v: Any, f: Fields, key: str) -> float:
    """Seconds, from a number (seconds) or ``90s``, ``60m``, ``2h``, ``1d``."""
    if isinstance(v, bool):
        raise f.error(key, f"must be a duration (90s, 60m, 2h) or seconds, got {v!r}")
    if isinstance(v, int | float):
        s = float(v)
    else:
        m = _DURATION.match(str(v))
        if m is None:
            raise f.error(key, f"must be a duration (90s, 60m, 2h) or seconds, got {v!r}")
        s = float(m.group(1)) * _UNITS[m.group(2) or "s"]
    if not 0 < s <= MAX_DURATION_S:
        raise f.error(key, f"must be above 0 and at most 30 days, got {v!r}")
    return s
