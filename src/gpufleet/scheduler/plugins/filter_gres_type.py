"""Slurm's --gres=gpu:TYPE:N (and --gpus*=TYPE:N): only nodes whose GPU type name is TYPE.

The type is the site's name for its GPUs (the node's ``gres_type``; by default the catalog
model's family in lower case, ``a100`` for every A100), matched as a name, not a model."""

from __future__ import annotations

from collections.abc import Sequence

from gpufleet.model.job import JobSpec
from gpufleet.scheduler.filters import never_reason
from gpufleet.scheduler.framework import SUCCESS, Code, Status
from gpufleet.scheduler.request import Select
from gpufleet.scheduler.snapshot import NodeView

NAME = "filter/gres_type"


class Plugin:
    def applies(self, sel: Select) -> bool:
        return bool(sel.gres_type)

    def node_ok(self, sel: Select, node: NodeView) -> bool:
        return node.gres_type == sel.gres_type

    def check(
        self, spec: JobSpec, sel: Select, nodes: Sequence[NodeView], passing: Sequence[NodeView]
    ) -> Status:
        if passing:
            return SUCCESS
        types = sorted({n.gres_type for n in nodes if n.gres_type})
        return Status(
            Code.UNRESOLVABLE,
            never_reason(
                f"no node has GPU type {sel.gres_type!r} (the cluster's types: "
                f"{', '.join(types) or 'none'})",
                NAME,
                gres_type=sel.gres_type,
            ),
        )
