"""Best fit: each worker goes to the node it leaves with the fewest free GPUs.

Through the free-capacity buckets this costs a few dictionary looks, not a node scan; data
locality breaks near-ties. Gangs go anywhere unless the job asks for a topology."""

from __future__ import annotations

from random import Random

from gpufleet.scheduler.framework import Choice
from gpufleet.scheduler.plugins._index_place import tightest
from gpufleet.scheduler.plugins.base import PlaceBase
from gpufleet.scheduler.request import WorkerRequest
from gpufleet.scheduler.workspace import Domain, Workspace

NAME = "place/bestfit"


class Plugin(PlaceBase):
    prefers_topology = False
    first_fit = True  # choose() is the first candidate (no dataset): no random number, no state

    def choose(self, req: WorkerRequest, ws: Workspace, domain: Domain, rng: Random) -> Choice:
        return tightest(req, ws, domain)
