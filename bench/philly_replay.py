"""Philly trace replay (issue 3): speed and footprint of one replay, and the policy table.

The headline run: ``philly_dev.csv`` (53,779 jobs) on 64 nodes × 8 GPUs in 4 leaves, fairshare +
topology + EASY backfill, the 13 virtual clusters as equal-share queues, exact time limits. It
prints the process's wall and CPU seconds from its first line and its peak RSS
(``ru_maxrss``), then the replay's figures. Targets: ≤ 30 s wall, ≤ 2 GiB.

``--table`` adds fifo, sjf, fairshare and las (LAS preempting by its own rule, Tiresias' 3,200
GPU-s threshold), each with EASY backfill and without (strict order), one process per run
(``--workers`` at a time), as a Markdown table for BENCHMARKS.md.

    .venv/bin/python bench/philly_replay.py [--jobs N] [--table] [--workers 2]
"""

from __future__ import annotations

import time

PROCESS_START = time.perf_counter()  # before the imports: "the whole process"

import argparse  # noqa: E402
import resource  # noqa: E402
import sys  # noqa: E402
from concurrent.futures import ProcessPoolExecutor  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402

from gpufleet.sim.metrics import ReplayMetrics  # noqa: E402
from gpufleet.sim.replay import (  # noqa: E402
    ProfileChoice,
    run_replay,
)

if __package__ in (None, ""):  # run as a file (python bench/X.py): the checkout on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.philly import DEFAULT_TRACE, GPUS_PER_NODE, LEAVES, NODES, philly_workload  # noqa: E402

HEADLINE = ProfileChoice("fairshare", "topology", "easy")
TABLE = tuple(
    ProfileChoice(order, "topology", backfill, ("order",) if order == "las" else ())
    for order in ("fifo", "sjf", "fairshare", "las")
    for backfill in ("easy", "none")
)


@dataclass(frozen=True, slots=True)
class Measured:
    label: str
    metrics: ReplayMetrics
    cycles: int
    load_s: float
    process_wall_s: float  # of the process that ran it, from its start
    process_cpu_s: float
    peak_rss_mib: float


def _usage() -> tuple[float, float]:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024  # Linux: KiB


def replay(trace: Path, choice: ProfileChoice, limit: int | None) -> Measured:
    """One replay in this process, measured from the process's start."""
    start = time.perf_counter()
    cluster, jobs = philly_workload(trace, limit)
    load_s = time.perf_counter() - start
    run = run_replay(cluster, jobs, choice)
    cpu, rss = _usage()
    return Measured(
        run.label,
        run.metrics,
        run.cycles,
        load_s,
        time.perf_counter() - PROCESS_START,
        cpu,
        rss,
    )


def _replay_in_worker(args: tuple[str, ProfileChoice, int | None]) -> Measured:
    trace, choice, limit = args
    return replay(Path(trace), choice, limit)


def _h(s: float | None) -> str:
    return "—" if s is None else f"{s / 3600:.2f} h"


def _f(v: float | None, fmt: str) -> str:
    return "—" if v is None else format(v, fmt)


def table(rows: list[Measured]) -> str:
    head = (
        "| profile | avg JCT | p99 JCT | avg wait | utilization | makespan / LB | "
        "fairness vs entitlement | "
        "preemptions | sim wall |\n|---|--:|--:|--:|--:|--:|--:|--:|--:|"
    )
    lines = [head]
    for r in rows:
        m = r.metrics
        lines.append(
            f"| {r.label} | {_h(m.avg_jct_s)} | {_h(m.p99_jct_s)} | {_h(m.avg_wait_s)} | "
            f"{100 * m.utilization:.1f} % | {_f(m.makespan_ratio, '.3f')} | "
            f"{_f(m.entitlement_fairness, '.3f')} | {m.preemptions:,} | {m.wall_s:.1f} s |"
        )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--jobs", type=int, default=None, help="replay only the first N jobs")
    ap.add_argument("--table", action="store_true", help="also the 8-profile policy table")
    ap.add_argument("--workers", type=int, default=2, help="table runs at a time")
    args = ap.parse_args()
    if not args.trace.exists():
        print(f"error: {args.trace} not found", file=sys.stderr)
        return 2

    head = replay(args.trace, HEADLINE, args.jobs)
    m = head.metrics
    print(f"## {head.label}: {m.jobs:,} jobs on {NODES} × {GPUS_PER_NODE} GPUs, {LEAVES} leaves")
    print(
        f"process wall {head.process_wall_s:.1f} s · CPU {head.process_cpu_s:.1f} s · peak RSS "
        f"{head.peak_rss_mib:,.0f} MiB · load {head.load_s:.2f} s · replay {m.wall_s:.1f} s · "
        f"{head.cycles:,} cycles ({1e3 * m.wall_s / max(1, head.cycles):.2f} ms/cycle)"
    )
    print(
        f"avg JCT {_h(m.avg_jct_s)} · p99 JCT {_h(m.p99_jct_s)} · avg wait {_h(m.avg_wait_s)} · "
        f"utilization {100 * m.utilization:.1f} % · makespan {_h(m.makespan_s)} / LB "
        f"{_h(m.makespan_lower_bound_s)} (last arrival + duration {_h(m.arrival_bound_s)}) · "
        f"fairness vs entitlement {_f(m.entitlement_fairness, '.3f')} · "
        f"never schedulable {m.never_schedulable} · "
        f"unfinished {m.unfinished}"
    )
    sys.stdout.flush()
    if not args.table:
        return 0
    work = [(str(args.trace), c, args.jobs) for c in TABLE]
    with ProcessPoolExecutor(max_workers=max(1, args.workers)) as pool:
        rows = list(pool.map(_replay_in_worker, work))
    print()
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
