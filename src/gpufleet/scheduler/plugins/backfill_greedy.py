"""Greedy (first-fit) backfill without reservation: any later job that fits starts. Good
utilisation, but a large gang can starve behind a stream of small jobs; kept as a reference."""

from __future__ import annotations

from gpufleet.scheduler.plugins.base import BackfillBase

NAME = "backfill/greedy"


class Plugin(BackfillBase):
    reserves = False
