"""Slurm's -w/--nodelist: the job must include every listed node (one worker on each);
with more workers than listed nodes, the others go where they fit (as Slurm adds nodes)."""

from __future__ import annotations

from collections.abc import Sequence

from gpufleet.model.job import JobSpec
from gpufleet.scheduler.filters import never_reason
from gpufleet.scheduler.framework import SUCCESS, Code, Status
from gpufleet.scheduler.request import Select
from gpufleet.scheduler.snapshot import NodeView

NAME = "filter/nodelist"


class Plugin:
    def applies(self, sel: Select) -> bool:
        return bool(sel.nodelist)

    def node_ok(self, sel: Select, node: NodeView) -> bool:
        return True  # the listed nodes are required, not the only ones allowed

    def check(
        self, spec: JobSpec, sel: Select, nodes: Sequence[NodeView], passing: Sequence[NodeView]
    ) -> Status:
        known = {n.name for n in passing}
        missing = [x for x in sel.nodelist if x not in known]
        if not missing:
            return SUCCESS
        absent = [x for x in missing if x not in {n.name for n in nodes}]
        what = (
            f"node {', '.join(absent[:5])} (in -w) is not in the cluster or not schedulable"
            if absent
            else f"node {', '.join(missing[:5])} (in -w) is ruled out by the job's other terms"
        )
        return Status(Code.UNRESOLVABLE, never_reason(what, NAME, nodes=missing))
