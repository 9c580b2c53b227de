"""The idle-governance bench's workload is what its text says: a full cluster, every job in a
governed queue, a node in ten at 0 % whose jobs the core finds idle."""

from __future__ import annotations

from bench.idle_governance import build, links
from gpufleet.core.controller import Controller
from gpufleet.server.service.idlewatch import utilization


def test_the_bench_cluster_is_full_and_a_tenth_of_it_idle() -> None:
    ctrl: Controller = build(nodes=20, per_job=4, pending=5, queues=2)
    assert len(ctrl.running) == 40 and ctrl.pending_count == 5
    ls = links(ctrl)
    for t in (100.0, 105.0):
        ctrl.now = t
        used: dict[tuple[str, str, float], float] = {}
        ev = utilization(ctrl, ls, 5.0, used)
        assert ev is not None and len(ev.samples) == 40
        ctrl.handle(t, ev, schedule=False)
    idle = {j for j, s in ctrl.idle.idle_seconds().items() if s > 0}
    assert len(idle) == 4  # 2 nodes of 20, 2 jobs each
    assert abs(sum(used.values()) - 36 * 4 * 5.0) < 1e-6  # the busy GPUs, 5 s each
