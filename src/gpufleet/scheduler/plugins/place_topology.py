"""Topology-aware: a gang spans as few levels of the fabric tree as it can (one node, else one
leaf, else one pod, else anywhere), in the domain that fits it most tightly, and best fit
inside it, so large free blocks stay whole for the next large gang."""

from __future__ import annotations

from random import Random

from gpufleet.scheduler.framework import Choice
from gpufleet.scheduler.plugins._index_place import tightest
from gpufleet.scheduler.plugins.base import PlaceBase
from gpufleet.scheduler.request import WorkerRequest
from gpufleet.scheduler.workspace import Domain, Workspace

NAME = "place/topology"


class Plugin(PlaceBase):
    prefers_topology = True
    first_fit = True  # choose() is the first candidate (no dataset): no random number, no state

    def choose(self, req: WorkerRequest, ws: Workspace, domain: Domain, rng: Random) -> Choice:
        return tightest(req, ws, domain)
