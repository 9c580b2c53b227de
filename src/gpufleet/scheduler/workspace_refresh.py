"""A cycle's workspace made by updating the last one in place: re-indexing only the nodes
whose free capacity changed, into their buckets at their index's place, is far cheaper than a
fresh ``Workspace`` of every node when most nodes are as they were."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from gpufleet.scheduler.free_counts import full_count, partly_used, with_in_order
from gpufleet.scheduler.snapshot import NodeView
from gpufleet.scheduler.workspace import Workspace


def refreshed(
    prev: Workspace | None,
    nodes: Sequence[NodeView],
    changed: Iterable[int] | None = None,
) -> Workspace:
    """``Workspace(nodes)``, made by updating ``prev`` in place where that is cheaper.

    ``prev`` must be a ``Workspace(old)`` that nobody changed since (callers work on
    copies), for ``old`` the caller's earlier nodes; a view that is the very object it was
    is taken as unchanged. Only nodes whose free capacity changed are re-indexed, into
    their buckets at their index's place, so the buckets keep the order a fresh workspace
    has. A node renamed, moved, resized or changed in health builds a new workspace.
    ``changed``, when given, holds every index whose view may be another object."""
    if prev is None or len(prev.views) != len(nodes):
        return Workspace(nodes)
    old = prev.views
    if changed is None:
        changed = [i for i, (a, b) in enumerate(zip(old, nodes, strict=True)) if a is not b]
    else:
        changed = [i for i in changed if old[i] is not nodes[i]]
    for i in changed:
        a, b = old[i], nodes[i]
        if (
            a.name != b.name
            or a.leaf != b.leaf
            or a.pod != b.pod
            or a.gpu_model != b.gpu_model
            or a.schedulable != b.schedulable
            or a.features != b.features
            or a.gres_type != b.gres_type
            or a.labels != b.labels  # a replica count (model/replicas.py) among them
            or len(a.gpu_free) != len(b.gpu_free)
        ):
            return Workspace(nodes)
    prev.touched = []  # a new log: an index kept on ``prev`` (``state_index``) is rebuilt
    prev.copied_from = None
    for i in changed:
        v = nodes[i]
        prev.cpu[i] = v.cpu_free
        prev.mem[i] = v.mem_free
        if prev.gfree[i] == v.gpu_free:
            prev.gfree[i] = v.gpu_free
            continue
        prev.unindex(i)
        prev.gfree[i] = v.gpu_free
        prev.full[i] = full_count(v.gpu_free)
        _index_in_place(prev, i)
    prev.show(nodes)
    return prev


def _index_in_place(ws: Workspace, i: int) -> None:
    """``_index`` that puts node ``i`` where index order has it, not last."""
    counted = ws.count_in(i)
    if counted is None:
        return
    m, key, k, g = counted
    mb, lb = ws.buckets[m], ws.leaf_buckets[key]
    mb[k] = with_in_order(mb[k], i)
    lb[k] = with_in_order(lb[k], i)
    if k < len(g) and partly_used(g):
        ws.partial[key] = with_in_order(ws.partial.get(key, {}), i)
