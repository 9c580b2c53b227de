"""The shared vocabulary: GPU catalog, cluster and queue specs, job specs and states, reasons.

Standard library only, so that every layer can import it.

The names below are loaded on first use (PEP 562): importing a submodule (``model.hostlist``,
``model.limits``) imports this package first, and the ``sbatch`` shim, which needs only those,
would otherwise pay for the whole model (catalog, constraint parser, containers) per command.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # not typing at run time: its import is ~10 ms of a command (issue 27)
if TYPE_CHECKING:
    from typing import Any

    from gpufleet.model.catalog import GpuModel, find, lookup
    from gpufleet.model.cluster import ClusterSpec, NodeSpec
    from gpufleet.model.errors import SpecError
    from gpufleet.model.job import Job, JobSpec, JobState, Topology, TopologyLevel
    from gpufleet.model.queue import QueueSpec
    from gpufleet.model.reason import Reason, ReasonCode
    from gpufleet.model.resources import MILLI, UNLIMITED, Resources

# each name: the submodule that defines it
_WHERE = {
    "GpuModel": "catalog",
    "find": "catalog",
    "lookup": "catalog",
    "ClusterSpec": "cluster",
    "NodeSpec": "cluster",
    "SpecError": "errors",
    "Job": "job",
    "JobSpec": "job",
    "JobState": "job",
    "Topology": "job",
    "TopologyLevel": "job",
    "QueueSpec": "queue",
    "Reason": "reason",
    "ReasonCode": "reason",
    "MILLI": "resources",
    "UNLIMITED": "resources",
    "Resources": "resources",
}


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = f"{__name__}.{where}"
    __import__(module)  # not importlib's import_module: importlib's own import is ~2 ms
    value = getattr(sys.modules[module], name)
    globals()[name] = value  # once: later lookups do not come here
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_WHERE])


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
