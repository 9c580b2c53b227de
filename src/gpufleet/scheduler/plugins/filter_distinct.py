"""Slurm's -N/--nodes: every worker on a node of its own, so the job needs as many nodes that
could each hold one worker (on an empty cluster) as it has workers."""

from __future__ import annotations

from collections.abc import Sequence

from gpufleet.model.job import JobSpec
from gpufleet.model.resources import MILLI
from gpufleet.scheduler.filters import never_reason
from gpufleet.scheduler.framework import SUCCESS, Code, Status
from gpufleet.scheduler.request import Select
from gpufleet.scheduler.snapshot import NodeView

NAME = "filter/distinct"


def holds_one(spec: JobSpec, n: NodeView) -> bool:
    """Whether ``n``, empty, could hold one worker of ``spec``."""
    if spec.gpu_models and spec.gpus_per_worker and n.gpu_model not in spec.gpu_models:
        return False
    gpus_ok = n.gpus >= spec.gpus_per_worker if spec.gpu_milli >= MILLI else n.gpus >= 1
    return gpus_ok and n.cpu_total >= spec.cpu_milli and n.mem_total >= spec.memory_mib


class Plugin:
    def applies(self, sel: Select) -> bool:
        return sel.distinct

    def node_ok(self, sel: Select, node: NodeView) -> bool:
        return True

    def check(
        self, spec: JobSpec, sel: Select, nodes: Sequence[NodeView], passing: Sequence[NodeView]
    ) -> Status:
        fit = sum(1 for n in passing if holds_one(spec, n))
        if fit >= spec.workers:
            return SUCCESS
        return Status(
            Code.UNRESOLVABLE,
            never_reason(
                f"needs {spec.workers} distinct nodes, {fit} fit (one worker each: "
                f"{spec.describe().split(' × ')[-1]}, {spec.cpu_milli / MILLI:g} CPUs, "
                f"{spec.memory_mib / 1024:g} GiB)",
                NAME,
                needed_nodes=spec.workers,
                nodes=fit,
            ),
        )
