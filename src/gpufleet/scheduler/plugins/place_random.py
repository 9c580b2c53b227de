"""Uniformly random among feasible nodes (a baseline)."""

from __future__ import annotations

from gpufleet.scheduler.plugins._scored_place import ScoredPlace

NAME = "place/random"


class Plugin(ScoredPlace):
    policy = "random"
