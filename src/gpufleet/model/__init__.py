"""The shared vocabulary: GPU catalog, cluster and queue specs, job specs and states, reasons.

Standard library only, so that every layer can import it.
"""

from gpufleet.model.catalog import GpuModel, find, lookup
from gpufleet.model.cluster import ClusterSpec, NodeSpec
from gpufleet.model.errors import SpecError
from gpufleet.model.job import Job, JobSpec, JobState, Topology, TopologyLevel
from gpufleet.model.queue import QueueSpec
from gpufleet.model.reason import Reason, ReasonCode
from gpufleet.model.resources import MILLI, UNLIMITED, Resources

__all__ = [
    "MILLI",
    "UNLIMITED",
    "ClusterSpec",
    "GpuModel",
    "Job",
    "JobSpec",
    "JobState",
    "NodeSpec",
    "QueueSpec",
    "Reason",
    "ReasonCode",
    "Resources",
    "SpecError",
    "Topology",
    "TopologyLevel",
    "find",
    "lookup",
]
