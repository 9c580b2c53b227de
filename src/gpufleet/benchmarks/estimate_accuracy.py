"""How good the estimated starts are: |estimated − actual start| on the Philly trace.

Replays the headline profile (fairshare + topology + EASY backfill, 64 × 8 GPUs in 4 leaves,
the virtual clusters as equal-share queues, exact time limits) with Reasons on, and reads
each job's estimated start in the first cycle that sees it pending (what a user asking right
after submitting would be told); then compares it with when the job did start. Jobs that
started in their first cycle are left out (they were never told an estimate). Reported per
bound ("reserved": the EASY reservation; "planned": the plan of the queue) and in all, with
how many pending jobs got no estimate.

The replay asks every cycle for the new jobs' estimates, which the plain replay never does:
it is slower than ``bench/philly_replay.py``; ``--jobs`` replays a prefix of the trace.

    .venv/bin/python bench/estimate_accuracy.py [--jobs N]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import replace
from pathlib import Path

import gpufleet.core.controller as controller_module
from gpufleet.benchmarks.philly import DEFAULT_TRACE, philly_workload
from gpufleet.scheduler.cycle import run_cycle
from gpufleet.scheduler.decisions import CycleResult
from gpufleet.scheduler.framework import Profile
from gpufleet.scheduler.snapshot import Snapshot
from gpufleet.sim.engine import Simulation
from gpufleet.sim.replay import ProfileChoice

HEADLINE = ProfileChoice("fairshare", "topology", "easy")


def percentile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--jobs", type=int, default=None, help="replay only the first N jobs")
    args = ap.parse_args()
    cluster, jobs = philly_workload(args.trace, args.jobs)
    profile: Profile = replace(HEADLINE.build(), explain=True)

    told: dict[str, tuple[float | None, str, float]] = {}  # id → (estimate, bound, when told)

    def cycle_and_read(snap: Snapshot, prof: Profile) -> CycleResult:
        res = run_cycle(snap, prof)
        for p in snap.pending:
            if p.id not in told and p.id in res.reasons:
                r = res.reasons[p.id]
                told[p.id] = (r.estimated_start, r.start_bound, snap.now)
        return res

    controller_module.run_cycle = cycle_and_read  # type: ignore[assignment]
    sim = Simulation(cluster, profile, jobs)
    t0 = time.perf_counter()
    sim.run()
    wall = time.perf_counter() - t0

    errors: dict[str, list[float]] = {"reserved": [], "planned": []}
    early = 0  # started before the estimate
    none = 0
    for job_id, (est, bound, _) in told.items():
        start = sim.outcomes[job_id].first_start
        if start is None:
            continue
        if est is None:
            none += 1
            continue
        errors.setdefault(bound, []).append(abs(est - start))
        early += start < est - 1e-6
    every = [e for xs in errors.values() for e in xs]
    print(
        f"## estimated vs actual start: {len(jobs):,} Philly jobs, {HEADLINE.label}, "
        f"64 × 8 GPUs, exact time limits · replay {wall:.1f} s"
    )
    print(f"pending when submitted and started later: {len(told):,} · no estimate: {none:,}")
    for bound, xs in [*errors.items(), ("all", every)]:
        if xs:
            mean, p50, p90 = sum(xs) / len(xs), percentile(xs, 0.5), percentile(xs, 0.9)
            print(
                f"{bound:>8}: {len(xs):>6,} jobs · mean |err| {mean / 3600:.2f} h · "
                f"p90 {p90 / 3600:.2f} h · median {p50 / 3600:.2f} h"
            )
    if every:
        print(f"started before the estimate: {early:,} of {len(every):,}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
