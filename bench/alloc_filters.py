"""What Slurm's allocation terms cost one scheduling cycle (issue 12).

The run: 2,000 nodes × 8 GPUs (H100-SXM, 112 cores, 1 TiB) in 40 leaves, every other node
with feature ``ib`` (the rest ``eth``); 3,000 pending gangs of 2, 3 or 4 workers × 2 GPUs, in
three forms: plain, on distinct nodes (``-N``), and on distinct ``ib`` nodes (``-N -C ib``).
Profile ``order=fifo admit=quota place=topology backfill=easy``. For each form, the jobs the
cycle starts and its CPU time (``time.process_time()`` around ``run_cycle``, the least of
``--repeats`` cycles over the same snapshot).

    PYTHONPATH=src .venv/bin/python bench/alloc_filters.py [--nodes N] [--jobs N] [--json]
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from typing import Any

from gpufleet.model.job import JobSpec
from gpufleet.model.resources import MILLI
from gpufleet.scheduler.cycle import run_cycle
from gpufleet.scheduler.framework import Profile
from gpufleet.scheduler.snapshot import NodeView, PendingJob, Snapshot

FORMS: dict[str, dict[str, Any]] = {
    "plain": {},
    "distinct": {"distinct_nodes": True},
    "distinct, -C ib": {"distinct_nodes": True, "constraint": "ib"},
}


def nodes(n: int) -> list[NodeView]:
    cpu, mem = 112 * MILLI, 1024 * 1024
    return [
        NodeView(
            f"n{i:05d}", f"leaf-{i * 40 // n}", "pod-0", "H100-SXM", (MILLI,) * 8,
            cpu, mem, cpu, mem, features=frozenset({"ib" if i % 2 else "eth"}),
        )
        for i in range(n)
    ]  # fmt: skip


def run(n_nodes: int, n_jobs: int, repeats: int) -> list[dict[str, Any]]:
    ns = nodes(n_nodes)
    prof = Profile.build(order="fifo", place="topology", backfill="easy")
    out = []
    for form, alloc in FORMS.items():
        pending = [
            PendingJob(
                f"j{i}",
                replace(JobSpec(f"j{i}", "u", workers=2 + i % 3, gpus_per_worker=2), **alloc),
                float(i),
            )
            for i in range(n_jobs)
        ]
        snap = Snapshot(0.0, ns, (), pending)
        best, started = float("inf"), 0
        for _ in range(repeats):
            t = time.process_time()
            res = run_cycle(snap, prof)
            best = min(best, time.process_time() - t)
            started = len(res.starts)
        out.append({"form": form, "started": started, "cpu_ms": round(best * 1000, 1)})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=2000)
    ap.add_argument("--jobs", type=int, default=3000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = run(args.nodes, args.jobs, args.repeats)
    if args.json:
        print(json.dumps(rows))
    else:
        for r in rows:
            print(f"{r['form']:>16}: {r['started']:>5} started, {r['cpu_ms']:>7.1f} CPU ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
