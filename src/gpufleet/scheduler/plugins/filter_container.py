"""A job that runs in a container image: only nodes whose agent has a container runtime (it
says which at registration; the controller keeps them as the node's label
``scheduler.containers.LABEL``, a fact of the node like its other labels)."""

from __future__ import annotations

from collections.abc import Sequence

from gpufleet.model.job import JobSpec
from gpufleet.scheduler.containers import NO_RUNTIME, has_runtime
from gpufleet.scheduler.filters import never_reason
from gpufleet.scheduler.framework import SUCCESS, Code, Status
from gpufleet.scheduler.request import Select
from gpufleet.scheduler.snapshot import NodeView

NAME = "filter/container"


class Plugin:
    def applies(self, sel: Select) -> bool:
        return sel.container

    def node_ok(self, sel: Select, node: NodeView) -> bool:
        return has_runtime(node.labels)

    def check(
        self, spec: JobSpec, sel: Select, nodes: Sequence[NodeView], passing: Sequence[NodeView]
    ) -> Status:
        if passing:
            return SUCCESS
        return Status(Code.UNRESOLVABLE, never_reason(NO_RUNTIME, NAME))
