"""Two plans' estimated starts side by side, and how they combine: one replay, every sampled job's
first estimate under the plan over the cluster and under the plan with the big jobs per node,
then |estimate − actual start| for each plan, the later of the two (the default, ADR 0070), the
earlier, and their mean.

Same replay and sample as ``bench/estimate_accuracy.py`` (the headline profile, 64 × 8 GPUs, the
virtual clusters as equal-share queues, exact time limits; ``--sample``/``--seed`` as there;
the outcomes digest printed at the end is the same): at the first cycle that sees a sampled job
pending, both plans are worked out from that cycle's snapshot and result (``StartPlan`` with
``plan_later_of_two`` off, and with ``plan_big_per_node``), so the combinations are compared on
the same jobs. A job holding EASY's reservation is told the reservation in every plan.

    .venv/bin/python bench/estimate_plans.py [--jobs N] [--sample F] [--seed S] [--parts N]
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from gpufleet.scheduler.decisions import CycleResult
from gpufleet.scheduler.estimate import RESERVED, StartPlan
from gpufleet.scheduler.framework import Profile
from gpufleet.scheduler.snapshot import PendingJob, Snapshot
from gpufleet.sim.engine import Simulation

if __package__ in (None, ""):  # run as a file (python bench/X.py): the checkout on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.estimate_accuracy import (
    HEADLINE,
    fraction,
    in_part,
    outcomes_digest,
    percentile,
    replay_reading,
    sampled,
)
from bench.philly import DEFAULT_TRACE, philly_workload

Row = tuple[float, float, float]  # (over the cluster, big per node, actual start)
COMBINED: dict[str, Callable[[float, float], float]] = {
    "over the cluster": lambda a, b: a,
    "big per node": lambda a, b: b,
    "the later (default)": max,
    "the earlier": min,
    "the mean": lambda a, b: (a + b) / 2,
}


def dump(
    trace: Path, limit: int | None, sample: float, seed: int, part: tuple[int, int]
) -> tuple[list[Row], str]:
    """Each sampled job's first estimate under both plans (where both give one), and its
    actual start."""
    cluster, jobs = philly_workload(trace, limit)
    profile: Profile = replace(HEADLINE.build(), explain=True)
    alone = replace(profile, plan_later_of_two=False)
    big = replace(profile, plan_big_per_node=True)
    asked = {j.id for j in jobs if sampled(j.id, sample, seed) and in_part(j.id, *part)}
    told: dict[str, tuple[float, float]] = {}

    def read(snap: Snapshot, res: CycleResult, p: PendingJob) -> None:
        one, two = StartPlan(snap, alone, res).get(p.id), StartPlan(snap, big, res).get(p.id)
        if one is not None and two is not None:
            told[p.id] = (one.at, one.at if one.bound == RESERVED else two.at)

    sim, _, _ = replay_reading(Simulation(cluster, profile, jobs), asked, read)
    rows = []
    for job_id, (a, b) in told.items():
        start = sim.outcomes[job_id].first_start
        if start is not None:
            rows.append((a, b, start))
    return rows, outcomes_digest(sim)


def table(rows: list[Row]) -> list[str]:
    out = [f"{'plan':>20}: median / p90 / mean |err| over {len(rows):,} jobs"]
    if not rows:
        return [*out, "no sampled job waited"]
    for name, f in COMBINED.items():
        errs = [abs(f(a, b) - s) / 3600 for a, b, s in rows]
        mean = sum(errs) / max(1, len(errs))
        med, p90 = percentile(errs, 0.5), percentile(errs, 0.9)
        out.append(f"{name:>20}: {med:.2f} h / {p90:.2f} h / {mean:.2f} h")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--jobs", type=int, default=None, help="replay only the first N jobs")
    ap.add_argument("--sample", type=fraction, default=0.1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--parts", type=int, default=1, help="split the sampled jobs over N processes")
    a = ap.parse_args()
    how = [(a.trace, a.jobs, a.sample, a.seed, (k, a.parts)) for k in range(a.parts)]
    if a.parts > 1:
        with multiprocessing.get_context("fork").Pool(a.parts) as pool:
            parts = pool.starmap(dump, how)
    else:
        parts = [dump(*how[0])]
    if len({d for _, d in parts}) != 1:
        raise SystemExit("the parts' replays differ: their outcomes digests are not the same")
    print("\n".join(table([r for rows, _ in parts for r in rows])))
    print(f"outcomes digest: {parts[0][1]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
