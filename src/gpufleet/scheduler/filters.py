"""Node filters: which nodes may ever take one of a job's workers, and why none may.

A filter is a plugin module (``NAME = "filter/…"``, as the other extension points) whose
``Plugin`` answers, for a job's ``Select`` (Slurm's -w, -x, -C, --gres=gpu:TYPE, --exclusive,
-N distinct nodes): whether it has anything to say (``applies``), whether one node passes
(``node_ok``: static facts only, names, features, GPU type), and the job's Status given how
many nodes pass it and every filter before it (``check``: UNRESOLVABLE with a Reason when no
free capacity could ever make the job fit). Unlike the other points, every filter always runs:
they are the job's own terms, not a site's policy. The workspace keeps, per Select, the nodes
that pass them all; the simulator and the live controller share them through the scheduler.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from gpufleet.model.job import JobSpec
from gpufleet.model.reason import Reason, ReasonCode
from gpufleet.scheduler.request import Select
from gpufleet.scheduler.snapshot import NodeView


class FilterPlugin(Protocol):
    def applies(self, sel: Select) -> bool: ...

    def node_ok(self, sel: Select, node: NodeView) -> bool: ...

    def check(
        self, spec: JobSpec, sel: Select, nodes: Sequence[NodeView], passing: Sequence[NodeView]
    ) -> Any: ...  # a framework.Status


_FILTERS: list[tuple[str, FilterPlugin]] | None = None
# the order reasons are looked for in: the most specific first
ORDER = ("filter/exclude", "filter/gres_type", "filter/engines", "filter/constraint",
         "filter/nodelist", "filter/container", "filter/exclusive", "filter/distinct")  # fmt: skip


def plugins() -> list[tuple[str, FilterPlugin]]:
    """Every filter plugin, by NAME, in ``ORDER`` (others after, by name)."""
    global _FILTERS
    if _FILTERS is None:
        from gpufleet.scheduler import framework

        names = [n for n in framework.registry() if n.startswith("filter/")]
        names.sort(key=lambda n: (ORDER.index(n) if n in ORDER else len(ORDER), n))
        _FILTERS = [(n, framework.make("filter", n)) for n in names]
    return _FILTERS


def passes(sel: Select, node: NodeView) -> bool:
    return all(p.node_ok(sel, node) for _, p in plugins() if p.applies(sel))


def eligible(sel: Select, nodes: Sequence[NodeView]) -> frozenset[int]:
    """Indices of ``nodes`` that pass every filter for ``sel``."""
    active = [p for _, p in plugins() if p.applies(sel)]
    return frozenset(i for i, n in enumerate(nodes) if all(p.node_ok(sel, n) for p in active))


def never(spec: JobSpec, nodes: Sequence[NodeView]) -> tuple[str, Reason] | None:
    """The first filter that rules ``spec`` out on ``nodes`` (the schedulable ones, however
    free), as (plugin name, Reason); None when the filters leave room enough."""
    sel = Select.of(spec)
    if sel is None:
        return None
    for choice in sel.choices():
        found = _never_one(spec, choice, nodes)
        if found is None:
            return None
        last = found
    if len(sel.choices()) > 1:
        name, r = last
        text = sel.constraint.text() if sel.constraint else ""
        return name, Reason(
            r.code, f"no one choice of -C {text!r} holds for the whole job: {r.message}", r.data
        )
    return last


def _never_one(spec: JobSpec, sel: Select, nodes: Sequence[NodeView]) -> tuple[str, Reason] | None:
    passing = list(nodes)
    for name, p in plugins():
        if not p.applies(sel):
            continue
        passing = [n for n in passing if p.node_ok(sel, n)]
        status = p.check(spec, sel, nodes, passing)
        if not status.ok:
            reason = status.reason or Reason(ReasonCode.NEVER, f"ruled out by {name}")
            return name, reason
    return None


def never_reason(message: str, plugin: str, **data: Any) -> Reason:
    return Reason(ReasonCode.NEVER, message, {"filter": plugin, **data})
