"""Rolling maintenance of a 16-node simulated cluster in batches of 4 (issue 26): its wall time,
what of it is waiting for running jobs to end, and the jobs it disturbed.

    PYTHONPATH=src:. .venv/bin/python bench/maintain.py [--nodes 16] [--batch 4] [--job-s 20]
        [--deadline S] [--validate device,storage]

A ``LocalCluster`` of real processes (a controller and one agent per node, 8 simulated H100
each). Every node runs one 8-GPU job, ``sleep`` for a time spread evenly over [job_s/2, job_s],
and as many more jobs wait in the queue (they take the nodes the batches give back). Then
``maintain --nodes all --batch B --run 'sleep 1' --validate LAYERS`` (through the API, as the
CLI does) runs to its end. Per batch: its wall time and its drain (from its start until its last
node ran nothing and its command began); the rest is the rollout's own cost (the command, the
validation on the node, the controller's rounds). Disturbed: a job with more than one attempt or
not SUCCEEDED (with ``--deadline``, the jobs still running past it are requeued).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from gpufleet.ops.localcluster import LocalCluster, wait_until


def job(i: int, seconds: float) -> dict[str, object]:
    return {
        "name": f"work-{i}",
        "gpus_per_worker": 8,
        "cpus": 1,
        "memory_gib": 1,
        "command": ["sleep", f"{seconds:.1f}"],
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--nodes", type=int, default=16)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--job-s", type=float, default=20.0)
    p.add_argument("--deadline", type=float, default=None)
    p.add_argument("--validate", default="device,storage")
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as d:
        # the production rule (ADR 0031): an agent that misses heartbeats on a loaded machine
        # keeps its tasks for the tolerance (LocalCluster's test default fences at 1.5 s)
        c = LocalCluster(
            Path(d),
            agents=a.nodes,
            heartbeat_s=1.0,
            node_grace_s=0.0,
            controller_args=["--outage-tolerance-s", "60"],
        )
        with c:
            run(c, a)


def run(c: LocalCluster, a: argparse.Namespace) -> None:
    n = a.nodes
    with c.user("bench") as u, c.admin() as adm:
        ids = []
        for i in range(n):
            (jid,) = u.submit(job(i, a.job_s / 2 + a.job_s / 2 * i / max(1, n - 1)))
            ids.append(jid)
        wait_until("every node busy", lambda: sum(j.state == "RUNNING" for j in u.jobs()) >= n, 120)
        for i in range(n):
            (jid,) = u.submit(job(n + i, a.job_s / 2))
            ids.append(jid)
        body: dict[str, object] = {
            "nodes": "all",
            "batch": str(a.batch),
            "run": "sleep 1",
            "validate_layers": [x for x in a.validate.split(",") if x],
        }
        if a.deadline is not None:
            body["deadline_s"] = a.deadline
        t0 = time.monotonic()
        m = adm.start_maintenance(body)
        starts: dict[int, float] = {}
        drained: dict[int, float] = {}
        while (m := adm.maintenance(m.id)).state not in ("done", "failed", "cancelled"):
            now = time.monotonic() - t0
            starts.setdefault(m.batch, now)
            mine = [x for x in m.nodes if x.batch == m.batch]
            if mine and all(x.phase != "draining" for x in mine):
                drained.setdefault(m.batch, now)
            time.sleep(0.1)
        wall = time.monotonic() - t0
        ends = {b: starts.get(b + 1, wall) for b in starts}
        ended = ("SUCCEEDED", "FAILED", "CANCELLED", "TIMED_OUT")
        wait_until("every job ended", lambda: all(u.job(j).state in ended for j in ids), 300)
        jobs = [u.job(j) for j in ids]
        disturbed = [j.id for j in jobs if j.attempt > 1 or j.state != "SUCCEEDED"]
    print(f"maintenance {m.id}: {m.state} ({m.why}); {n} nodes, batches of {a.batch}")
    for x in m.nodes:
        if x.why:
            print(f"  {x.node} {x.phase}: {x.why}")
    for j in jobs:
        if j.id in disturbed:
            last = (j.events or [])[:8]
            print(f"  job {j.id} {j.state} attempt {j.attempt}: {[e.why for e in last]}")
    print(f"wall {wall:.1f} s; jobs disturbed {len(disturbed)} of {len(jobs)} {disturbed}")
    print("| batch | wall | drain (jobs ending) | rollout's own |")
    print("|---|---|---|---|")
    for b in sorted(starts):
        took = ends[b] - starts[b]
        drain = drained.get(b, ends[b]) - starts[b]
        print(f"| {b} | {took:.1f} s | {drain:.1f} s | {took - drain:.1f} s |")


if __name__ == "__main__":
    main()
