"""Topology-aware: a gang spans as few levels of the fabric tree as it can (one node, else one
leaf, else one pod, else anywhere), in the domain that fits it most tightly, and best fit
inside it, so large free blocks stay whole for the next large gang.

A fraction of a GPU goes where ``place/fgd-strand`` puts it (issue 24: on the openb pod lists
it packs fractions better than FGD, BENCHMARKS.md; ADR 0053); its target
workload is built, at the first fraction of a cycle, from the jobs pending and running."""

from __future__ import annotations

from random import Random

from gpufleet.scheduler.framework import Choice
from gpufleet.scheduler.plugins import place_fgd_strand
from gpufleet.scheduler.plugins._index_place import tightest
from gpufleet.scheduler.plugins.base import PlaceBase
from gpufleet.scheduler.request import WorkerRequest
from gpufleet.scheduler.snapshot import Snapshot
from gpufleet.scheduler.workspace import Domain, Workspace

NAME = "place/topology"


class Plugin(PlaceBase):
    prefers_topology = True
    first_fit = (
        True  # choose() of whole GPUs is the first candidate (no dataset): no random, no state
    )

    def __init__(self) -> None:
        self._fractions = place_fgd_strand.Plugin()
        self._snap: Snapshot | None = None  # the cycle's, until its first fraction prepares

    def prepare(self, snap: Snapshot, ws: Workspace) -> None:
        self._snap = snap

    def choose(self, req: WorkerRequest, ws: Workspace, domain: Domain, rng: Random) -> Choice:
        if req.gpus and not req.whole:
            if self._snap is not None:
                self._fractions.prepare(self._snap, ws)
                self._snap = None
            return self._fractions.choose(req, ws, domain, rng)
        return tightest(req, ws, domain)
