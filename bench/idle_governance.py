"""What the idle-GPU policy costs the controller per interval at 5,000 nodes (issue 25), as a
ratio to a scheduling cycle without it.

The run: a Controller (the live one's core) with ``--nodes`` simulated 8-GPU nodes (H100), full:
one running job per ``--gpus-per-job`` GPUs, all in queues with Princeton's idle policy, and
``--pending`` jobs waiting that cannot start; each node's heartbeat metrics as its agent sends
them (the simulated backend's DCGM fields, ``agent.gpu.metrics_payload``), a node in ten with
its GPUs at 0 %. Measured, CPU time (``time.process_time()``), the least of ``--repeats``:

- the cycle: ``Controller.tick`` (a scheduling pass over the full cluster and its pending jobs);
- a placing cycle, for scale: ``run_cycle`` on the headline placement workload
  (``sim.placement_bench.build``: the same nodes, 10,000 1-GPU jobs + 2,000 gangs to place);
- the governance: the service's sample (``server.service.idlewatch.utilization``: every running
  job's GPUs' DCGM_FI_DEV_GPU_UTIL out of its nodes' latest metrics, and the used GPU-time
  accumulated for accounting) and the core's judgement of it (``Controller.handle`` of the
  ``GpuUtilization`` event, no pass).

    PYTHONPATH=src .venv/bin/python bench/idle_governance.py [--nodes N] [--json]
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from gpufleet.agent.gpu import metrics_payload
from gpufleet.agent.simgpu import SimulatedGpus
from gpufleet.core.controller import Controller
from gpufleet.core.events import JobSubmitted, QueueChanged, TaskStarted
from gpufleet.model.cluster import ClusterSpec, NodeSpec
from gpufleet.model.idle import IdlePolicy
from gpufleet.model.job import JobSpec, JobState
from gpufleet.model.queue import QueueSpec
from gpufleet.scheduler.cycle import run_cycle
from gpufleet.server.service.idlewatch import utilization
from gpufleet.server.service.links import NodeLink
from gpufleet.sim import placement_bench as pb


def build(nodes: int, per_job: int, pending: int, queues: int) -> Controller:
    specs = tuple(
        NodeSpec(f"n{i:05d}", "H100", 8, 112_000, 1024 * 1024, f"leaf{i // 128}", "pod0")
        for i in range(nodes)
    )
    leaves = tuple(dict.fromkeys((n.leaf, n.pod) for n in specs))
    qs = tuple(QueueSpec(f"q{k}", idle=IdlePolicy()) for k in range(queues))
    ctrl = Controller(pb.profile(), ClusterSpec("bench", specs, leaves, qs))
    for q in qs:
        ctrl.handle(0.0, QueueChanged(q), schedule=False)
    n_jobs = nodes * 8 // per_job
    evs = [
        JobSubmitted(
            f"j{k}",
            JobSpec(f"j{k}", f"u{k % 200}", queue=f"q{k % queues}", gpus_per_worker=per_job),
            0.0,
        )
        for k in range(n_jobs + pending)
    ]
    ctrl.handle(0.0, *evs[:n_jobs])
    ctrl.handle(1.0, *(TaskStarted(j, 1, 0) for j in list(ctrl.running)), schedule=False)
    ctrl.handle(2.0, *evs[n_jobs:], schedule=False)
    running = sum(1 for r in ctrl.jobs.values() if r.job.state is JobState.RUNNING)
    assert running == n_jobs, (running, n_jobs)
    return ctrl


def links(ctrl: Controller) -> dict[str, NodeLink]:
    sim = SimulatedGpus.from_spec("8xH100", node="bench")
    busy = metrics_payload(_loaded(sim, {i: 1.0 for i in range(8)}), {}, {})
    some_idle = metrics_payload(_loaded(sim, {}), {}, {})
    out = {}
    for i, name in enumerate(sorted(ctrl.nodes)):
        # a node in ten has its GPUs at 0 % (its jobs idle); each node its own copy, as
        # heartbeats arrive
        m = json.loads(json.dumps(some_idle if i % 10 == 0 else busy))
        out[name] = NodeLink(address="", last_seen=0.0, metrics=m)
    return out


def _loaded(sim: SimulatedGpus, load: dict[int, float]) -> Any:
    sim.set_load(load, 10.0)
    return sim.sample(10.0)


def best(f: Any, repeats: int) -> float:
    t = float("inf")
    for _ in range(repeats):
        t0 = time.process_time()
        f()
        t = min(t, time.process_time() - t0)
    return t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--gpus-per-job", type=int, default=4)
    ap.add_argument("--pending", type=int, default=2000)
    ap.add_argument("--queues", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    t0 = time.process_time()
    ctrl = build(a.nodes, a.gpus_per_job, a.pending, a.queues)
    ls = links(ctrl)
    setup = time.process_time() - t0
    now = [100.0]

    def cycle() -> None:
        now[0] += 5.0
        ctrl.tick(now[0])

    def govern() -> None:
        now[0] += 5.0
        used: dict[tuple[str, str, float], float] = {}
        ctrl.now = now[0]
        ev = utilization(ctrl, ls, 5.0, used)
        assert ev is not None
        ctrl.handle(now[0], ev, schedule=False)

    c = best(cycle, a.repeats)
    g = best(govern, a.repeats)
    snap = pb.build(nodes=a.nodes, jobs=2 * a.nodes, gangs=a.nodes * 2 // 5).snapshot
    prof = pb.profile()
    placing = best(lambda: run_cycle(snap, prof), max(1, a.repeats // 2))
    watched = len(ctrl.idle.watched)
    idle_jobs = sum(1 for s in ctrl.idle.idle_seconds().values() if s > 0)
    res = {
        "nodes": a.nodes,
        "running_jobs": len(ctrl.running),
        "pending_jobs": ctrl.pending_count,
        "watched": watched,
        "idle_jobs": idle_jobs,
        "cycle_s": round(c, 4),
        "governance_s": round(g, 4),
        "ratio": round(g / c, 3) if c > 0 else None,
        "placing_cycle_s": round(placing, 4),
        "ratio_to_placing": round(g / placing, 4) if placing > 0 else None,
        "setup_s": round(setup, 1),
    }
    if a.json:
        print(json.dumps(res))
        return
    for k, v in res.items():
        print(f"{k:>14}: {v}")


if __name__ == "__main__":
    main()
