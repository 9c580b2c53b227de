"""Slurm's -x/--exclude: the listed nodes take no worker of the job."""

from __future__ import annotations

from collections.abc import Sequence

from gpufleet.model.job import JobSpec
from gpufleet.scheduler.filters import never_reason
from gpufleet.scheduler.framework import SUCCESS, Code, Status
from gpufleet.scheduler.request import Select
from gpufleet.scheduler.snapshot import NodeView

NAME = "filter/exclude"


class Plugin:
    def applies(self, sel: Select) -> bool:
        return bool(sel.exclude)

    def node_ok(self, sel: Select, node: NodeView) -> bool:
        return node.name not in sel.exclude

    def check(
        self, spec: JobSpec, sel: Select, nodes: Sequence[NodeView], passing: Sequence[NodeView]
    ) -> Status:
        if passing:
            return SUCCESS
        return Status(
            Code.UNRESOLVABLE,
            never_reason(
                f"every node is excluded by -x ({len(nodes)} node(s) in the cluster)", NAME
            ),
        )
