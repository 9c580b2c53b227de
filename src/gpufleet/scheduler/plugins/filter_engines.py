"""GPU engines and capabilities (``--gres=nvenc:N``, ``gpu_engines``): only nodes whose GPU
model has what the job asks of each GPU (NVENC, NVDEC, NVJPG counts; graphics, display,
full-rate FP64), as the catalog's datasheet figures say (model/engines.py)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from gpufleet.model.engines import engines_of, lacking
from gpufleet.model.job import JobSpec
from gpufleet.scheduler.filters import never_reason
from gpufleet.scheduler.framework import SUCCESS, Code, Status
from gpufleet.scheduler.request import Select
from gpufleet.scheduler.snapshot import NodeView

NAME = "filter/engines"


def wants(sel: Select) -> dict[str, int]:
    return dict(sel.engines)


def describe(engines: dict[str, int]) -> str:
    """``{"nvenc": 1}`` → ``NVENC``; ``{"nvenc": 2, "graphics": 1}`` → ``2 NVENC and graphics``."""
    parts = [
        f"{n} {e.upper()}" if n > 1 else (e.upper() if e.startswith("nv") else e)
        for e, n in engines.items()
    ]
    return " and ".join(parts)


class Plugin:
    def applies(self, sel: Select) -> bool:
        return bool(sel.engines)

    def node_ok(self, sel: Select, node: NodeView) -> bool:
        return not lacking(node.gpu_model, wants(sel))

    def check(
        self, spec: JobSpec, sel: Select, nodes: Sequence[NodeView], passing: Sequence[NodeView]
    ) -> Status:
        if passing:
            return SUCCESS
        want = wants(sel)
        models = Counter(n.gpu_model for n in nodes if n.gpu_model)
        counted = [e for e in want if e.startswith("nv")]
        unknown = [m for m in models if any(engines_of(m).count(e) is None for e in counted)]
        have = ", ".join(f"{m} ({c} node{'s' if c != 1 else ''})" for m, c in models.items())
        msg = (
            f"needs GPUs with {describe(want)}; the cluster's GPUs have none "
            f"({have or 'no GPU nodes'})"
        )
        if unknown:
            msg += f"; the catalog does not know the video engines of {', '.join(unknown)}"
        return Status(Code.UNRESOLVABLE, never_reason(msg, NAME, engines=want))
