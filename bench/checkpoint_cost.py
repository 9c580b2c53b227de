"""What preemption costs once a preempted job resumes from its last checkpoint (issue 11).

Replays a prefix of the Philly trace (64 × 8 GPUs in 4 leaves, equal-share queues, exact time
limits, as ``bench/philly_replay.py``) through one profile — by default LAS preempting by its
own rule, the profile that preempts — once per checkpoint interval, and prints per run the
figures a preemption moves: JCT, wait, utilization, preemptions, lost GPU-hours, sim wall.
``none`` is no checkpoint (restart from zero, the default). ``--dump DIR`` writes each run's
per-job outcomes (``id,first_start,end_time,state,attempts,preemptions,run_s``) to diff trees.

Runs against any tree on PYTHONPATH: where the engine has no checkpoint (before issue 11)
only ``none`` is accepted and means "whatever that tree does".

    PYTHONPATH=src .venv/bin/python bench/checkpoint_cost.py --jobs 10000 --intervals none,1800
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import sys
import time
from pathlib import Path

from gpufleet.sim.engine import SimConfig
from gpufleet.sim.replay import (
    ProfileChoice,
    ReplayRun,
    parse_profile,
    run_replay,
)

if __package__ in (None, ""):  # run as a file (python bench/X.py): the checkout on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.philly import DEFAULT_TRACE, philly_workload

BASE = ProfileChoice("fifo", "topology", "easy")  # what the --profile text leaves out
HAS_CHECKPOINTS = "checkpoint_interval_s" in {f.name for f in dataclasses.fields(SimConfig)}


def _interval(text: str) -> float | None:
    return None if text.strip() == "none" else float(text)


def _config(interval: float | None) -> SimConfig:
    if interval is None:
        return SimConfig()
    if not HAS_CHECKPOINTS:
        raise SystemExit("this tree's simulator has no checkpoints: use --intervals none")
    return SimConfig(checkpoint_interval_s=interval)  # type: ignore[call-arg, unused-ignore]


def _dump(path: Path, run: ReplayRun) -> None:
    cols = ("id", "first_start", "end_time", "state", "attempts", "preemptions", "run_s")
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(cols)
        for r in run.rows:
            w.writerow([getattr(r, c) for c in cols])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--jobs", type=int, default=10_000, help="the first N jobs (0 = all)")
    ap.add_argument("--profile", default="las+topology+easy+order")
    ap.add_argument("--intervals", default="none,3600,1800,600", help="seconds, or none")
    ap.add_argument("--dump", type=Path, default=None, help="per-job outcomes to this folder")
    args = ap.parse_args()

    choice = parse_profile(args.profile, BASE)
    cluster, jobs = philly_workload(args.trace, args.jobs or None)
    print(f"{choice.label} · {len(jobs):,} jobs of {args.trace.name} · {cluster.total_gpus} GPUs")
    print(
        "| checkpoint | avg JCT (h) | p99 JCT (h) | avg wait (h) | utilization | preemptions "
        "| lost GPU-h (preempt) | lost GPU-h (failure) | sim wall (s) |"
    )
    print("|---|--:|--:|--:|--:|--:|--:|--:|--:|")
    for text in args.intervals.split(","):
        interval = _interval(text)
        start = time.perf_counter()
        run = run_replay(cluster, jobs, choice, _config(interval))
        wall = time.perf_counter() - start
        m = run.metrics
        lost_p = getattr(m, "lost_gpu_hours_preemption", float("nan"))
        lost_f = getattr(m, "lost_gpu_hours_node_failure", float("nan"))
        print(
            f"| {text.strip()} | {(m.avg_jct_s or 0) / 3600:.2f} | {(m.p99_jct_s or 0) / 3600:.2f} "
            f"| {(m.avg_wait_s or 0) / 3600:.2f} | {100 * m.utilization:.1f} % "
            f"| {m.preemptions:,} | {lost_p:,.1f} | {lost_f:,.1f} | {wall:.1f} |",
            flush=True,
        )
        if m.unfinished:
            print(f"  ({m.unfinished} job(s) unfinished)")
        if args.dump is not None:
            args.dump.mkdir(parents=True, exist_ok=True)
            _dump(args.dump / f"{choice.label}-{text.strip()}.csv", run)


if __name__ == "__main__":
    main()
