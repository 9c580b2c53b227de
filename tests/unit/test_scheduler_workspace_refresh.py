"""``Workspace.refreshed`` gives what a fresh ``Workspace(nodes)`` gives, the order of every
bucket included (placement walks buckets in order, so the order decides ties)."""

from __future__ import annotations

from dataclasses import replace

from builders import node
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufleet.model.resources import MILLI
from gpufleet.scheduler.snapshot import NodeView
from gpufleet.scheduler.workspace import Workspace


def state(ws: Workspace) -> object:
    return (
        list(ws.views),
        ws.gfree,
        ws.cpu,
        ws.mem,
        ws.full,
        ws.ok,
        ws.free_full,
        ws.model_free,
        ws.models,
        ws.cpu_only,
        ws.by_name,
        {m: [list(b) for b in bs] for m, bs in ws.buckets.items()},
        {k: [list(b) for b in bs] for k, bs in ws.leaf_buckets.items()},
        {k: list(v) for k, v in ws.partial.items() if v},  # an empty set is no set
    )


FREE = st.sampled_from((0, 0, MILLI, MILLI, MILLI, 300, 700))


@st.composite
def clusters(draw):
    out = []
    for i in range(draw(st.integers(1, 9))):
        gpus = draw(st.sampled_from((0, 2, 4, 8, 8)))
        v = node(
            f"n{i:02d}",
            gpus,
            model=draw(st.sampled_from(("H100-SXM", "A100-80GB"))),
            leaf=f"leaf-{draw(st.integers(0, 2))}",
            schedulable=draw(st.integers(0, 5)) > 0,
        )
        out.append(replace(v, gpu_free=tuple(draw(FREE) for _ in range(gpus))))
    return out


@st.composite
def changes(draw, nodes: list[NodeView]):
    """The nodes after some jobs started and ended: some views new, some the same objects."""
    out = []
    for v in nodes:
        what = draw(st.sampled_from(("same", "same", "copy", "free", "free", "health")))
        if what == "copy":
            v = replace(v)  # equal values, a new object
        elif what == "free":
            v = replace(
                v,
                gpu_free=tuple(draw(FREE) for _ in v.gpu_free),
                cpu_free=draw(st.integers(0, v.cpu_total)),
                mem_free=draw(st.integers(0, v.mem_total)),
            )
        elif what == "health":
            v = replace(v, schedulable=not v.schedulable)
        out.append(v)
    return out


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.data())
def test_refreshed_equals_a_fresh_workspace(data) -> None:
    nodes = data.draw(clusters())
    ws = Workspace.refreshed(None, nodes)
    assert state(ws) == state(Workspace(nodes))
    for _ in range(data.draw(st.integers(1, 4))):
        nodes = data.draw(changes(nodes))
        ws = Workspace.refreshed(ws, nodes)
        assert state(ws) == state(Workspace(nodes))
        # a cycle's working copy of it may change freely without touching it
        work = ws.copy()
        for i in range(work.n):
            work.hold(i)
        assert state(ws) == state(Workspace(nodes))


def test_refreshed_updates_in_place_and_keeps_index_order() -> None:
    nodes = [node(f"n{i:02d}", 8) for i in range(4)]
    ws = Workspace(nodes)
    assert list(ws.buckets["H100-SXM"][8]) == [0, 1, 2, 3]
    busy = [replace(v, gpu_free=(0,) * 8) if v.name in ("n00", "n02") else v for v in nodes]
    ws2 = Workspace.refreshed(ws, busy)
    assert ws2 is ws  # patched, not rebuilt
    assert list(ws2.buckets["H100-SXM"][0]) == [0, 2]
    idle = [replace(v) if v.name == "n02" else v for v in nodes]  # n02 idle again, n00 too
    ws3 = Workspace.refreshed(ws2, idle)
    assert ws3 is ws
    # a fresh workspace lists them by index; a plain re-insert would put n00 and n02 last
    assert list(ws3.buckets["H100-SXM"][8]) == [0, 1, 2, 3]


def test_a_node_added_or_changed_in_health_builds_anew() -> None:
    nodes = [node(f"n{i:02d}", 8) for i in range(3)]
    ws = Workspace(nodes)
    assert Workspace.refreshed(ws, [*nodes, node("n03")]) is not ws
    sick = [replace(nodes[0], schedulable=False), *nodes[1:]]
    assert Workspace.refreshed(ws, sick) is not ws
