"""Defragmentation (issue 25) on a live simulated cluster: large gangs' waits, GPUs idle by
fragmentation and the work lost, with and without ``preempt/defrag``.

Each run is a ``LocalCluster`` (a controller process and 4 agent processes of 8 simulated GPUs
in 2 leaves, schedule interval 0.5 s) fed the same seeded workload in real time: ``--small``
jobs of 2 or 4 GPUs (20-60 s, a time limit 10 s above) arriving at random over ``--span-s``
seconds, and ``--gangs`` gangs of 2 x 8 GPUs under one leaf (required, 20 s) at even times. The
jobs are ``sleep``s: a preempted one starts again from zero, so its lost work is its attempt's
run. The defrag run's policy is the default's scaled to the workload's time (about 1/100):
``interval_s=1, leaf_interval_s=6, savings_horizon_s=36, restart_cost_s=3``.

Figures come from the API afterwards (each job's events: its attempts' starts and ends), and
GPUs idle by fragmentation from those runs (``sim/fragmentation.py``).

    PYTHONPATH=src .venv/bin/python bench/defrag_live.py [--small 36] [--gangs 4] [--seed 1]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file (python bench/X.py): the checkout on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpufleet.api.schemas import JobOut
from gpufleet.ops.localcluster import LocalCluster
from gpufleet.sim.fragmentation import idle_by_fragmentation
from gpufleet.sim.metrics import JobRow

DEFRAG_POLICY = "interval_s=1,leaf_interval_s=6,savings_horizon_s=36,restart_cost_s=3"
PROFILES = {
    "base": [],
    "defrag": ["--preempt", "defrag,reclaim", "--defrag", DEFRAG_POLICY],
}
ENDED = {"SUCCEEDED", "FAILED", "CANCELLED", "TIMED_OUT"}
GPUS = 32


def workload(args: argparse.Namespace) -> list[tuple[float, dict[str, Any]]]:
    rng = random.Random(args.seed)
    out: list[tuple[float, dict[str, Any]]] = []
    for i in range(args.small):
        d = rng.uniform(20, 60)
        spec: dict[str, Any] = {
            "name": f"s{i}",
            "gpus_per_worker": rng.choice((2, 4)),
            "command": f"sleep {d:.1f}",
            "time_limit_s": d + 10,
        }
        out.append((rng.uniform(0, args.span_s), spec))
    for k in range(args.gangs):
        gang: dict[str, Any] = {
            "name": f"gang{k}",
            "workers": 2,
            "gpus_per_worker": 8,
            "topology": {"level": "leaf", "required": True},
            "command": "sleep 20",
            "time_limit_s": 40,
        }
        out.append(((k + 1) * args.span_s / (args.gangs + 1), gang))
    return sorted(out, key=lambda x: x[0])


def run(name: str, extra: list[str], args: argparse.Namespace, root: Path) -> dict[str, float]:
    c = LocalCluster(
        root / name,
        agents=4,
        leaves=2,
        heartbeat_s=0.5,
        schedule_interval_s=0.5,
        gateway="off",
        controller_args=extra,
    )
    with c:  # started here, stopped on the way out
        user = c.user("alice")
        t0 = time.monotonic()
        ids: list[str] = []
        for at, spec in workload(args):
            time.sleep(max(0.0, at - (time.monotonic() - t0)))
            ids += user.submit(spec)
        deadline = time.monotonic() + args.timeout_s
        while time.monotonic() < deadline:
            if all(j.state in ENDED for j in user.jobs(all_states=True, limit=10000)):
                break
            time.sleep(1.0)
        jobs = [user.job(i) for i in ids]
    return figures(jobs, time.monotonic() - t0)


def rows_of(jobs: list[JobOut]) -> tuple[list[JobRow], int, float]:
    """JobRows (each attempt's run from its events), the preemptions, the lost GPU-seconds."""
    rows, preemptions, lost = [], 0, 0.0
    for j in jobs:
        runs: list[tuple[float, float]] = []
        began: float | None = None
        for e in j.events or []:
            if e.state == "STARTING":
                began = e.time
            elif e.state in ENDED | {"PREEMPTED", "NODE_LOST"} and began is not None:
                runs.append((began, e.time))
                if e.state == "PREEMPTED":
                    preemptions += 1
                    lost += (e.time - began) * j.gpus
                began = None
        first = runs[0][0] if runs else None
        rows.append(
            JobRow(
                j.id, j.queue, j.gpus, j.submit_time, 0.0, first, j.end_time, j.state,
                j.attempt, 0, 0.0, runs=tuple(runs),
            )
        )  # fmt: skip
    return rows, preemptions, lost


def figures(jobs: list[JobOut], wall: float) -> dict[str, float]:
    rows, preemptions, lost = rows_of(jobs)
    large = [r for r in rows if r.gpus >= 16 and r.first_start is not None]
    lw = [r.first_start - r.submit_time for r in large if r.first_start is not None]
    aw = [r.first_start - r.submit_time for r in rows if r.first_start is not None]
    frag = idle_by_fragmentation(rows, GPUS, 16)
    return {
        "jobs": len(rows),
        "unfinished": sum(1 for j in jobs if j.state not in ENDED),
        "large_mean_wait_s": statistics.fmean(lw) if lw else 0.0,
        "large_max_wait_s": max(lw, default=0.0),
        "all_mean_wait_s": statistics.fmean(aw) if aw else 0.0,
        "frag_idle_gpu_s": frag.idle_gpu_s,
        "frag_idle_share_pct": 100 * frag.share,
        "preemptions": preemptions,
        "lost_gpu_s": lost,
        "makespan_s": max((r.end_time or 0.0) for r in rows) - min(r.submit_time for r in rows),
        "wall_s": wall,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", type=int, default=36)
    ap.add_argument("--gangs", type=int, default=4)
    ap.add_argument("--span-s", type=float, default=150.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout-s", type=float, default=900.0)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="defrag-live-") as tmp:
        out = {name: run(name, extra, args, Path(tmp)) for name, extra in PROFILES.items()}
    keys = list(next(iter(out.values())))
    print("| run | " + " | ".join(keys) + " |")
    print("|---" * (len(keys) + 1) + "|")
    for label, f in out.items():
        cells = (f"{v:,.0f}" if isinstance(v, int) else f"{v:,.1f}" for v in f.values())
        print(f"| {label} | " + " | ".join(cells) + " |")
    if args.json is not None:
        args.json.write_text(json.dumps({"args": vars(args), "runs": out}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
