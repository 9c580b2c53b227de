"""What the estimated starts cost a cycle that is read: the Reasons of every pending job (the
plan worked out on the first), with the plan over the cluster alone and with the later of two
plans (ADR 0070), on one snapshot.

Every GPU busy (``--nodes`` × ``--gpus`` GPUs, each node's job ending at its own time), then
``--pending`` pending jobs of 1 GPU, every ``--big-every``-th of a whole node (0: none). With no
job of several whole GPUs a worker pending the two plans are one, played once. The snapshot is
made by the scheduler tests' builders (``tests/unit/builders.py``); the minimum of ``--repeats``.

    .venv/bin/python bench/estimate_cost.py [--pending 2000] [--big-every 50] [--nodes 4]
        [--gpus 4] [--repeats 5]
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

from gpufleet.scheduler.cycle import run_cycle

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "unit"))
from builders import cluster, job, profile, running, snapshot  # type: ignore[import-not-found]


def reasons_ms(pending: int, big_every: int, nodes: int, gpus: int, later: bool, n: int) -> float:
    busy = [running(f"r{i}", (f"n{i:02d}", range(gpus)), limit=100.0 + i) for i in range(nodes)]
    size = [gpus if big_every and i % big_every == 0 else 1 for i in range(pending)]
    jobs = [job(f"p{i}", gpus=g, submit=i, limit=60.0 + i % 7) for i, g in enumerate(size)]
    snap = snapshot(cluster(nodes, gpus), jobs, busy)
    prof = replace(profile(order="fifo", backfill="easy"), plan_later_of_two=later)
    best = float("inf")
    for _ in range(n):
        res = run_cycle(snap, prof)
        t0 = time.perf_counter()
        for p in jobs:
            if p.id in res.reasons:
                res.reasons[p.id]  # the plan on the first, then each job's estimate
        best = min(best, time.perf_counter() - t0)
    return best * 1000


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pending", type=int, default=2000)
    ap.add_argument("--big-every", type=int, default=50)
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--gpus", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    for big in sorted({a.big_every, 0}, reverse=True):
        shape = f"every {big}th of {a.gpus} GPUs" if big else "all of 1 GPU"
        for later in (False, True):
            ms = reasons_ms(a.pending, big, a.nodes, a.gpus, later, a.repeats)
            plan = "the later of two plans" if later else "the plan over the cluster alone"
            print(f"{a.pending} pending ({shape}), {plan}: {ms:.1f} ms for every Reason")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
