"""How good the estimated starts are: |estimated − actual start| on the Philly trace.

Replays the headline profile (fairshare + topology + EASY backfill, 64 × 8 GPUs in 4 leaves,
the virtual clusters as equal-share queues, exact time limits) with Reasons on, and reads
each job's estimated start in the first cycle that sees it pending (what a user asking right
after submitting would be told); then compares it with when the job did start. Jobs that
started in their first cycle are left out (they were never told an estimate). Reported per
bound ("reserved": the EASY reservation; "planned": the plan of the queue) and in all, with
how many pending jobs got no estimate.

The replay asks every cycle for the new jobs' estimates, which the plain replay never does: a
cycle that reads one works out the plan of the queue (up to 2,000 jobs), which is what the
run costs (the first 10,000 jobs: ~10 min; the whole trace: over an hour). ``--jobs`` replays a
prefix of the trace; ``--sample F`` asks only for the estimates of a seeded random fraction F of
the jobs (``sampled``: a hash of the seed and the job's id, so a job is in or out whatever else
the trace holds, and a prefix's sample is the whole trace's, cut), so only the cycles that see
one of those arrive pending work out a plan. The replay itself runs over every job, unchanged:
the estimates are read, never acted on (the digest of the per-job outcomes printed at the end
is the same whatever ``--sample``). With a sample, the mean's 95 % confidence interval is
printed under the table, as if the errors were independent: jobs that arrive together err
together, so the true interval is wider (run other ``--seed``s to see how far they spread).

    .venv/bin/python bench/estimate_accuracy.py [--jobs N] [--sample F [--seed S]]
"""

from __future__ import annotations

import argparse
import hashlib
import math
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import gpufleet.core.controller as controller_module
from gpufleet.scheduler.cycle import run_cycle
from gpufleet.scheduler.decisions import CycleResult
from gpufleet.scheduler.framework import Profile
from gpufleet.scheduler.snapshot import Snapshot
from gpufleet.sim.engine import Simulation
from gpufleet.sim.replay import ProfileChoice

if __package__ in (None, ""):  # run as a file (python bench/X.py): the checkout on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.philly import DEFAULT_TRACE, philly_workload

HEADLINE = ProfileChoice("fairshare", "topology", "easy")


def percentile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]


def sampled(job_id: str, fraction: float, seed: int = 0) -> bool:
    """Whether the job's estimate is asked for: a Bernoulli draw of probability ``fraction``,
    made from a hash of ``seed`` and the job's id only (not its size, queue or arrival time, so
    the sample is unbiased; not the order of the trace, so a prefix's sample is the same jobs
    as the whole trace's)."""
    if fraction >= 1.0:
        return True
    h = hashlib.blake2b(f"{seed}:{job_id}".encode(), digest_size=8).digest()
    return int.from_bytes(h, "big") < fraction * 2**64


def outcomes_digest(sim: Simulation) -> str:
    """The replay's per-job outcomes (first start, end, state), as one hash."""
    h = hashlib.sha256()
    for job_id in sorted(sim.outcomes):
        o = sim.outcomes[job_id]
        h.update(f"{job_id}|{o.first_start!r}|{o.end_time!r}|{o.state}\n".encode())
    return h.hexdigest()[:16]


def fraction(text: str) -> float:
    f = float(text)
    if not 0.0 < f <= 1.0:
        raise argparse.ArgumentTypeError(f"{text}: a fraction in (0, 1]")
    return f


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--jobs", type=int, default=None, help="replay only the first N jobs")
    ap.add_argument(
        "--sample",
        type=fraction,
        default=1.0,
        help="ask for the estimates of this fraction of the jobs only (seeded; default: all)",
    )
    ap.add_argument("--seed", type=int, default=0, help="which sample (with --sample)")
    args = ap.parse_args()
    cluster, jobs = philly_workload(args.trace, args.jobs)
    profile: Profile = replace(HEADLINE.build(), explain=True)
    asked = {j.id for j in jobs if sampled(j.id, args.sample, args.seed)}

    told: dict[str, tuple[float | None, str, float]] = {}  # id → (estimate, bound, when told)

    def cycle_and_read(snap: Snapshot, prof: Profile) -> CycleResult:
        res = run_cycle(snap, prof)
        for p in snap.pending:
            if p.id in asked and p.id not in told and p.id in res.reasons:
                r = res.reasons[p.id]
                told[p.id] = (r.estimated_start, r.start_bound, snap.now)
        return res

    setattr(controller_module, "run_cycle", cycle_and_read)  # noqa: B010 (the name it calls)
    sim = Simulation(cluster, profile, jobs)
    t0, c0 = time.perf_counter(), time.process_time()
    sim.run()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0

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
        f"64 × 8 GPUs, exact time limits · replay {wall:.1f} s ({cpu:.1f} s CPU)"
    )
    if args.sample < 1.0:
        print(
            f"sample: estimates asked for {len(asked):,} of {len(jobs):,} jobs "
            f"(--sample {args.sample:g} --seed {args.seed})"
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
    if args.sample < 1.0 and len(every) > 1:
        half = 1.96 * statistics.stdev(every) / math.sqrt(len(every)) / 3600
        print(f"mean |err| of all, 95 % confidence interval: ± {half:.2f} h")
    print(f"outcomes digest: {outcomes_digest(sim)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
