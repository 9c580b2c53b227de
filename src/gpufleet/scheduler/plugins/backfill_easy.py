"""EASY backfill: the first job that cannot start gets a reservation at its earliest start
(from running jobs' time limits); later jobs start only if they end before it, by their own
time limit, or keep off the devices it reserved. Large gangs therefore never starve.

A running job without a time limit never frees its devices in that reckoning, so where users do
not set limits, ``assume_limit_s`` (Slurm's partition DefaultTime) stands in for theirs."""

from __future__ import annotations

from gpufleet.scheduler.plugins.base import BackfillBase

NAME = "backfill/easy"


class Plugin(BackfillBase):
    reserves = True

    def __init__(self, assume_limit_s: float | None = None) -> None:
        if assume_limit_s is not None and assume_limit_s <= 0:
            raise ValueError("assume_limit_s must be positive")
        self.assume_limit_s = assume_limit_s
