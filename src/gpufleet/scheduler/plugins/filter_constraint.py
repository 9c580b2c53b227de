"""Slurm's -C/--constraint: each node of the job has the features the expression asks for
(``&``, ``|``, parentheses; a matching OR ``[a|b]`` is tried one choice at a time)."""

from __future__ import annotations

from collections.abc import Sequence

from gpufleet.model.job import JobSpec
from gpufleet.scheduler.filters import never_reason
from gpufleet.scheduler.framework import SUCCESS, Code, Status
from gpufleet.scheduler.request import Select
from gpufleet.scheduler.snapshot import NodeView

NAME = "filter/constraint"
NO_FEATURE = "no node has feature "  # a feature the cluster lacks (sbatch: refused at submit)


class Plugin:
    def applies(self, sel: Select) -> bool:
        return sel.constraint is not None

    def node_ok(self, sel: Select, node: NodeView) -> bool:
        assert sel.constraint is not None
        return sel.constraint.holds(node.features)

    def check(
        self, spec: JobSpec, sel: Select, nodes: Sequence[NodeView], passing: Sequence[NodeView]
    ) -> Status:
        if passing:
            return SUCCESS
        assert sel.constraint is not None
        have = set().union(*(n.features for n in nodes)) if nodes else set()
        unknown = sorted(sel.constraint.names() - have)
        text = sel.constraint.text()
        msg = (
            f"{NO_FEATURE}{', '.join(unknown)}"
            if unknown
            else f"no node has the features -C {text!r} asks for"
        )
        return Status(Code.UNRESOLVABLE, never_reason(msg, NAME, constraint=text))
