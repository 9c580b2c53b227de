"""What an interrupted attempt keeps of its work: the rule shared by the simulator and, later,
the live controller (issue 11: one driver), so it lives here and not in a loop.

A job checkpoints every ``interval_s`` seconds of useful work, counted from the start of each
attempt (a restarted process starts its checkpoint timer anew). An attempt that did ``run_s``
seconds of useful work (restart overhead excluded) before it was preempted or lost its node
keeps ``floor(run_s / interval_s) × interval_s`` of it; without an interval it keeps nothing
and the next attempt starts from zero. A job that saves its state on the stop signal (SIGTERM,
within the grace before SIGKILL: how Tiresias, Gandiva and Slurm's GraceTime preempt training
jobs) keeps all of it when it is preempted; a node loss gives no such signal. Pure: no clock, no
I/O.
"""

from __future__ import annotations

import math

from gpufleet.model.errors import SpecError

# r / i of a checkpoint due exactly at the kill can come out a hair below the whole number in
# binary floating point (0.3 / 0.1 = 2.9999…): such a checkpoint counts as written
_EPS = 1e-9


def kept_work_s(run_s: float, interval_s: float | None, *, saved_at_stop: bool = False) -> float:
    """Seconds of ``run_s`` (useful work of one attempt) that its last checkpoint kept: all of
    it when the job ``saved_at_stop`` (a checkpoint written on the stop signal)."""
    if saved_at_stop:
        return max(0.0, run_s)
    if interval_s is None or run_s <= 0:
        return 0.0
    return min(run_s, math.floor(run_s / interval_s + _EPS) * interval_s)


def lost_work_s(run_s: float, interval_s: float | None, *, saved_at_stop: bool = False) -> float:
    """Seconds of ``run_s`` the next attempt does again."""
    return max(0.0, run_s) - kept_work_s(run_s, interval_s, saved_at_stop=saved_at_stop)


def check_interval(value: float | None, *, field: str, source: str = "") -> float | None:
    """``value`` if it is a usable interval (finite, > 0) or None; SpecError otherwise."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SpecError(f"must be a number of seconds, got {value!r}", source=source, field=field)
    if not math.isfinite(value) or value <= 0:
        raise SpecError(
            f"must be a finite number of seconds > 0, got {value!r}", source=source, field=field
        )
    return float(value)
