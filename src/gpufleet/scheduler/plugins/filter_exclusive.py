"""Slurm's --exclusive: each worker takes a whole node, so at most one worker per node and
only nodes that are idle (the workspace checks idleness; this plugin counts the nodes)."""

from __future__ import annotations

from collections.abc import Sequence

from gpufleet.model.job import JobSpec
from gpufleet.scheduler.filters import never_reason
from gpufleet.scheduler.framework import SUCCESS, Code, Status
from gpufleet.scheduler.request import Select
from gpufleet.scheduler.snapshot import NodeView

NAME = "filter/exclusive"


class Plugin:
    def applies(self, sel: Select) -> bool:
        return sel.exclusive

    def node_ok(self, sel: Select, node: NodeView) -> bool:
        return True

    def check(
        self, spec: JobSpec, sel: Select, nodes: Sequence[NodeView], passing: Sequence[NodeView]
    ) -> Status:
        if len(passing) >= spec.workers:
            return SUCCESS
        return Status(
            Code.UNRESOLVABLE,
            never_reason(
                f"needs {spec.workers} whole nodes (--exclusive), {len(passing)} may take it",
                NAME,
                needed_nodes=spec.workers,
                nodes=len(passing),
            ),
        )
