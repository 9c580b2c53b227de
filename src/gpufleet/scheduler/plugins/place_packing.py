"""GPU packing (the FGD paper's GpuPacking): fill partly used GPUs first, then partly used
nodes, keeping whole nodes free for whole-node jobs."""

from __future__ import annotations

from gpufleet.scheduler.plugins._scored_place import ScoredPlace

NAME = "place/packing"


class Plugin(ScoredPlace):
    policy = "gpupacking"
