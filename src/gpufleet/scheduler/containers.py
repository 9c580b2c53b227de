"""The container rule of placement (its filter: ``plugins/filter_container.py``): a job that
names an image runs only on a node whose agent has a container runtime (it says which at
registration; the controller keeps them as the node's label ``LABEL``, a fact of the node like
its other labels). A job whose image no node can run waits, saying so (``NO_RUNTIME``)."""

from __future__ import annotations

from collections.abc import Iterable

LABEL = "gpufleet.io/container-runtimes"  # the runtimes, comma-separated, the agent's first
RUNTIMES = ("apptainer", "enroot", "podman", "docker")
NO_RUNTIME = f"no node has a container runtime ({', '.join(RUNTIMES)})"


def has_runtime(labels: Iterable[tuple[str, str]]) -> bool:
    return any(k == LABEL and v.strip() for k, v in labels)
