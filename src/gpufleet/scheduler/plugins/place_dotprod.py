"""Dot product of the request with the node's remaining CPU and GPU (Tetris-style
alignment): a smaller product scores higher."""

from __future__ import annotations

from gpufleet.scheduler.plugins._scored_place import ScoredPlace

NAME = "place/dotprod"


class Plugin(ScoredPlace):
    policy = "dotprod"
