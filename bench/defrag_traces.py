"""Defragmentation (issue 25) on Alibaba's openb pods (with their departures) and on a Philly
slice: large jobs' waits, GPUs idle by fragmentation and the work lost, with and without
``preempt/defrag``, and with defrag's "how often" bounds off.

openb: ``openb_pod_list_default.csv``, each pod arriving at its ``creation_time`` and leaving
after its lifetime (``deletion_time - scheduled_time``), fractional GPUs kept, GPU models
dropped (the cluster is uniform), on ``--nodes`` x 8 GPUs in ``--leaves`` leaves: the trace's
demand peaks near 65 GPUs, so 8 nodes is loaded at its peak. Philly: the first ``--jobs`` jobs on
16 x 8 GPUs in 4 leaves, gangs of several nodes asking for one leaf (``philly_workload``, which
``defrag_philly.py`` shares).
Both FIFO + topology + EASY, exact time limits; every job checkpoints each ``--checkpoint-s``
and gets no notice, so a victim loses the work since its last checkpoint.

GPUs idle by fragmentation (``sim/fragmentation.py``): the free GPU-time during which a large
job (>= 8 GPUs) waited although as many GPUs as it needed were free in all.

    PYTHONPATH=src .venv/bin/python bench/defrag_traces.py --trace-set openb|philly [--json F]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

if __package__ in (None, ""):  # run as a file (python bench/X.py): the checkout on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.philly import DEFAULT_TRACE, GPUS_PER_NODE
from gpufleet.model.job import Topology, TopologyLevel
from gpufleet.scheduler.framework import Profile
from gpufleet.sim.engine import SimConfig, Simulation, TraceJob
from gpufleet.sim.fragmentation import idle_by_fragmentation
from gpufleet.sim.metrics import JobRow, job_rows
from gpufleet.sim.replay import ProfileChoice, equal_share_queues, uniform_cluster, with_queues
from gpufleet.sim.traces import TimeLimit, apply_time_limits, load_trace

OPENB = DEFAULT_TRACE.parents[1] / "alibaba-openb" / "openb_pod_list_default.csv"
BASE = ProfileChoice("fifo", "topology", "easy")
DEFRAG = replace(BASE, preempt=("defrag",))
UNBOUNDED = replace(DEFRAG, options={"preempt/defrag": {"interval_s": 0.0, "leaf_interval_s": 0.0}})
PROFILES = (("base", BASE), ("defrag", DEFRAG), ("defrag, no how-often bounds", UNBOUNDED))
LARGE_GPUS = 8


def philly_workload(trace: Path, limit: int) -> list[TraceJob]:
    """The Philly slice, with each gang of several nodes asking for one leaf."""
    jobs = apply_time_limits(load_trace(trace, "philly"), TimeLimit("exact"))[:limit]
    one_leaf = Topology(TopologyLevel.LEAF, required=True)
    return [
        replace(j, spec=replace(j.spec, topology=one_leaf)) if j.spec.workers > 1 else j
        for j in jobs
    ]


def openb_workload(trace: Path, limit: int) -> list[TraceJob]:
    jobs = apply_time_limits(load_trace(trace, "openb"), TimeLimit("exact"))
    jobs = [replace(j, spec=replace(j.spec, gpu_models=())) for j in jobs]
    return jobs[:limit] if limit else jobs


def run(choice: ProfileChoice, jobs: list[TraceJob], args: argparse.Namespace) -> dict[str, float]:
    cluster = with_queues(
        uniform_cluster(args.nodes, GPUS_PER_NODE, args.leaves), equal_share_queues(jobs)
    )
    # --grace-s: defrag_philly.py's notice for all (keeps work); none here
    cfg = SimConfig(
        checkpoint_interval_s=args.checkpoint_s, preempt_grace_s=getattr(args, "grace_s", None)
    )
    profile = Profile.build(
        order=choice.order,
        place=choice.placement,
        backfill=choice.backfill,
        preempt=choice.preempt,
        options=choice.options,
        explain=False,
    )
    sim = Simulation(cluster, profile, jobs, cfg)
    start = time.perf_counter()
    sim.run()
    wall = time.perf_counter() - start
    rows = job_rows(sim)
    return figures(rows, sim.preemptions, args.nodes * GPUS_PER_NODE, wall)


def figures(rows: list[JobRow], preemptions: int, capacity: int, wall: float) -> dict[str, float]:
    def waits(rs: list[JobRow]) -> list[float]:
        return [w for r in rs if (w := r.wait_s) is not None]

    large = [r for r in rows if r.gpus >= LARGE_GPUS]
    lw, aw = waits(large), waits(rows)
    frag = idle_by_fragmentation(rows, capacity, LARGE_GPUS)
    return {
        "jobs": len(rows),
        "large_jobs": len(large),
        "large_mean_wait_h": statistics.fmean(lw) / 3600 if lw else 0.0,
        "large_median_wait_h": statistics.median(lw) / 3600 if lw else 0.0,
        "large_p95_wait_h": _p95(lw) / 3600,
        "all_mean_wait_h": statistics.fmean(aw) / 3600 if aw else 0.0,
        "frag_idle_gpu_h": frag.idle_gpu_s / 3600,
        "frag_idle_share_pct": 100 * frag.share,
        "frag_blocked_h": frag.blocked_s / 3600,
        "unfinished": sum(1 for r in rows if r.end_time is None),
        "preemptions": preemptions,
        "lost_gpu_h": sum(r.gpus * r.lost_preempted_s for r in rows) / 3600,
        "wall_s": wall,
    }


def _p95(xs: list[float]) -> float:
    if not xs:
        return 0.0
    s = sorted(xs)
    return s[min(len(s) - 1, int(0.95 * len(s)))]


def print_table(out: dict[str, dict[str, float]]) -> None:
    """The figures as a Markdown table, one row per profile."""
    keys = list(next(iter(out.values())))
    print("| profile | " + " | ".join(keys) + " |")
    print("|---" * (len(keys) + 1) + "|")
    for label, f in out.items():
        cells = (f"{v:,.0f}" if isinstance(v, int) else f"{v:,.2f}" for v in f.values())
        print(f"| {label} | " + " | ".join(cells) + " |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace-set", choices=("openb", "philly"), required=True)
    ap.add_argument("--trace", type=Path, default=None)
    ap.add_argument(
        "--jobs", type=int, default=0, help="the first N jobs (0: openb all, philly 2000)"
    )
    ap.add_argument("--nodes", type=int, default=None)
    ap.add_argument("--leaves", type=int, default=4)
    ap.add_argument("--checkpoint-s", type=float, default=1800.0)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    if args.trace_set == "openb":
        args.nodes = args.nodes or 8
        jobs = openb_workload(args.trace or OPENB, args.jobs)
    else:
        args.nodes = args.nodes or 16
        jobs = philly_workload(args.trace or DEFAULT_TRACE, args.jobs or 2000)
    out = {label: run(c, jobs, args) for label, c in PROFILES}
    print_table(out)
    if args.json is not None:
        args.json.write_text(
            json.dumps(
                {"args": vars(args) | {"trace": str(args.trace)}, "runs": out},
                indent=1,
                default=str,
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
