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

The 80 % band (the Reason's ``start_low``/``start_high``, learned by the replay's own core from
how far its earlier estimates were off) is checked too: how many of the banded estimates' jobs
started within it (calibrated: 75-85 %). Slurm's ``squeue --start`` gives a start only where its
backfill holds a reservation: the ``reserved`` row is that figure on the same replay, and the
``slurm-like`` line says how many of the jobs it covers. ``--order`` replays another order
(``bench/estimate_plot.py`` runs several and plots their errors). ``--per-node`` plans a job of
several GPUs per worker per node (``Profile.plan_per_node``, off by default: worse here, see
BENCHMARKS.md); ``--big-per-node`` plans only those per node, the 1-GPU jobs counted over the
cluster and put on no node (``Profile.plan_big_per_node``, off by default: its p90 misses, see
BENCHMARKS.md); ``--arrivals`` plays the jobs forecast to arrive with them
(``Profile.plan_arrivals``, ``scheduler/arrivals``: the last ``--window`` hours again; off by
default); ``--no-per-node``/``--no-arrivals`` force them off. ``--parts N`` splits the sampled
jobs over N processes, each replaying the whole trace (the same estimates; each part's 80 %
band learns only from its own part's, so the band's figure is not the one-process run's).

    .venv/bin/python bench/estimate_accuracy.py [--jobs N] [--sample F [--seed S]] [--order O]
        [--per-node | --big-per-node] [--arrivals [--window H]] [--parts N]
"""

from __future__ import annotations

import argparse
import hashlib
import math
import multiprocessing
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import gpufleet.core.controller as controller_module
import gpufleet.scheduler.arrivals as arrivals_module
from gpufleet.scheduler.cycle import run_cycle
from gpufleet.scheduler.decisions import CycleResult
from gpufleet.scheduler.framework import Profile
from gpufleet.scheduler.snapshot import PendingJob, Snapshot
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


def in_part(job_id: str, k: int, n: int) -> bool:
    """Whether the job is in part ``k`` of ``n`` (``--parts``): a hash of its id only."""
    if n <= 1:
        return True
    return int.from_bytes(hashlib.blake2b(job_id.encode(), digest_size=8).digest(), "big") % n == k


def merged(parts: list[Measured]) -> Measured:
    """The parts' measures as one run's (wall: the longest part's; CPU: all parts')."""
    first = parts[0]
    if any(p.digest != first.digest for p in parts):
        raise SystemExit("the parts' replays differ: their outcomes digests are not the same")
    m = replace(first, errors={b: list(xs) for b, xs in first.errors.items()})
    m.signed = list(first.signed)
    for p in parts[1:]:
        m.asked += p.asked
        m.told += p.told
        m.none += p.none
        m.banded += p.banded
        m.within += p.within
        m.early += p.early
        m.cpu += p.cpu
        m.wall = max(m.wall, p.wall)
        m.signed += p.signed
        for b, xs in p.errors.items():
            m.errors.setdefault(b, []).extend(xs)
    return m


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
    ap.add_argument("--order", default=HEADLINE.order, help="the order plugin (fairshare)")
    ap.add_argument(
        "--per-node",
        action=argparse.BooleanOptionalAction,
        help="plan jobs of several GPUs per worker per node (Profile.plan_per_node; default: "
        "the profile's)",
    )
    ap.add_argument(
        "--big-per-node",
        action=argparse.BooleanOptionalAction,
        help="plan only jobs of several whole GPUs per worker per node, 1-GPU jobs over the "
        "cluster (Profile.plan_big_per_node; default: the profile's)",
    )
    ap.add_argument(
        "--later-of-two",
        action=argparse.BooleanOptionalAction,
        help="the later of the plan over the cluster and the plan with the big jobs per node "
        "(Profile.plan_later_of_two; default: the profile's)",
    )
    ap.add_argument(
        "--arrivals",
        action=argparse.BooleanOptionalAction,
        help="plan with the jobs forecast to arrive (Profile.plan_arrivals; default: the "
        "profile's)",
    )
    ap.add_argument(
        "--window", type=float, default=None, help="with --arrivals: the window, in hours"
    )
    ap.add_argument(
        "--parts",
        type=int,
        default=1,
        help="split the sampled jobs over N processes, each replaying the whole trace (the "
        "estimates are the same; each part's 80 %% band learns from its own part only)",
    )
    args = ap.parse_args()
    if args.window is not None:
        arrivals_module.WINDOW_S = args.window * 3600.0
    flags = (args.per_node, args.arrivals, args.big_per_node, args.later_of_two)
    how = (args.trace, args.jobs, args.sample, args.seed, args.order, *flags)
    if args.parts > 1:
        with multiprocessing.get_context("fork").Pool(args.parts) as pool:
            m = merged(pool.starmap(measure, [(*how, (k, args.parts)) for k in range(args.parts)]))
    else:
        m = measure(*how)
    report(m, args.sample, args.seed)
    return 0


@dataclass
class Measured:
    label: str
    jobs: int
    asked: int
    told: int
    none: int
    errors: dict[str, list[float]]  # by bound: |estimate − actual start|, s
    signed: list[float]  # actual − estimate, s (every bound)
    banded: int  # estimates with an 80 % band
    within: int  # … whose job started within it
    early: int  # started before the estimate
    wall: float
    cpu: float
    digest: str
    jct: list[float] = field(default_factory=list)  # every job that ended: end − submit, s


def measure(
    trace: Path,
    limit: int | None,
    sample: float,
    seed: int,
    order: str,
    per_node: bool | None = None,
    arrivals: bool | None = None,
    big_per_node: bool | None = None,
    later_of_two: bool | None = None,
    part: tuple[int, int] = (0, 1),
) -> Measured:
    """One replay reading the sampled jobs' first estimates (see the module's docstring)."""
    cluster, jobs = philly_workload(trace, limit)
    choice = replace(HEADLINE, order=order)
    profile: Profile = replace(choice.build(), explain=True)
    if per_node is not None:
        profile = replace(profile, plan_per_node=per_node)
    if arrivals is not None:
        profile = replace(profile, plan_arrivals=arrivals)
    if big_per_node is not None:
        profile = replace(profile, plan_big_per_node=big_per_node)
    if later_of_two is not None:
        profile = replace(profile, plan_later_of_two=later_of_two)
    asked = {j.id for j in jobs if sampled(j.id, sample, seed) and in_part(j.id, *part)}
    # id → (estimate, bound, band low, band high)
    told: dict[str, tuple[float | None, str, float | None, float | None]] = {}

    def read(snap: Snapshot, res: CycleResult, p: PendingJob) -> None:
        r = res.reasons[p.id]
        told[p.id] = (r.estimated_start, r.start_bound, r.start_low, r.start_high)

    sim, wall, cpu = replay_reading(Simulation(cluster, profile, jobs), asked, read)
    m = Measured(choice.label, len(jobs), len(asked), len(told), 0, {"reserved": [], "planned": []},
                 [], 0, 0, 0, wall, cpu, outcomes_digest(sim))  # fmt: skip
    m.jct = [o.end_time - o.submit_time for o in sim.outcomes.values() if o.end_time is not None]
    for job_id, (est, bound, low, high) in told.items():
        start = sim.outcomes[job_id].first_start
        if start is None:
            continue
        if est is None:
            m.none += 1
            continue
        m.errors.setdefault(bound, []).append(abs(est - start))
        m.signed.append(start - est)
        m.early += start < est - 1e-6
        if low is not None and high is not None:
            m.banded += 1
            m.within += low - 1e-6 <= start <= high + 1e-6
    return m


def replay_reading(
    sim: Simulation, asked: set[str], read: Callable[[Snapshot, CycleResult, PendingJob], None]
) -> tuple[Simulation, float, float]:
    """``sim`` run, ``read`` called once for each ``asked`` job, at the first cycle that gives it
    a Reason (what a user asking right after submitting would be told); the run's wall and CPU
    seconds. The estimates are read, never acted on: the replay is the same."""
    seen: set[str] = set()

    def cycle_and_read(snap: Snapshot, prof: Profile) -> CycleResult:
        res = run_cycle(snap, prof)
        for p in snap.pending:
            if p.id in asked and p.id not in seen and p.id in res.reasons:
                seen.add(p.id)
                read(snap, res, p)
        return res

    setattr(controller_module, "run_cycle", cycle_and_read)  # noqa: B010 (the name it calls)
    try:
        t0, c0 = time.perf_counter(), time.process_time()
        sim.run()
        return sim, time.perf_counter() - t0, time.process_time() - c0
    finally:
        setattr(controller_module, "run_cycle", run_cycle)  # noqa: B010


def report(m: Measured, sample: float, seed: int) -> None:
    errors = m.errors
    every = [e for xs in errors.values() for e in xs]
    print(
        f"## estimated vs actual start: {m.jobs:,} Philly jobs, {m.label}, "
        f"64 × 8 GPUs, exact time limits · replay {m.wall:.1f} s ({m.cpu:.1f} s CPU)"
    )
    if sample < 1.0:
        print(
            f"sample: estimates asked for {m.asked:,} of {m.jobs:,} jobs "
            f"(--sample {sample:g} --seed {seed})"
        )
    print(f"pending when submitted and started later: {m.told:,} · no estimate: {m.none:,}")
    for bound, xs in [*errors.items(), ("all", every)]:
        if xs:
            mean, p50, p90 = sum(xs) / len(xs), percentile(xs, 0.5), percentile(xs, 0.9)
            print(
                f"{bound:>8}: {len(xs):>6,} jobs · mean |err| {mean / 3600:.2f} h · "
                f"p90 {p90 / 3600:.2f} h · median {p50 / 3600:.2f} h"
            )
    if every:
        print(f"started before the estimate: {m.early:,} of {len(every):,}")
        reserved = len(errors.get("reserved", []))
        print(
            f"slurm-like (squeue --start: a start only where a reservation holds): "
            f"{reserved:,} of {len(every) + m.none:,} jobs "
            f"({100 * reserved / max(1, len(every) + m.none):.1f} %); gpufleet: {len(every):,}"
        )
    if m.banded:
        print(
            f"80 % band: the job started within it for {m.within:,} of {m.banded:,} banded "
            f"estimates ({100 * m.within / m.banded:.1f} %; {len(every) - m.banded:,} unbanded)"
        )
    if sample < 1.0 and len(every) > 1:
        half = 1.96 * statistics.stdev(every) / math.sqrt(len(every)) / 3600
        print(f"mean |err| of all, 95 % confidence interval: ± {half:.2f} h")
    print(f"outcomes digest: {m.digest}")


if __name__ == "__main__":
    raise SystemExit(main())
