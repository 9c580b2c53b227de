"""Defragmentation (issue 25) on a Philly slice: large gangs' waits and the work lost, with and
without ``preempt/defrag``.

The run: the first ``--jobs`` jobs of ``philly_dev.csv`` on ``--nodes`` × 8 GPUs in ``--leaves``
leaves (smaller than the Philly benches' 64 nodes, so that the slice loads it and small jobs
spread over the nodes), FIFO order, topology placement, EASY backfill; a gang of several nodes
asks for one leaf (``topology: leaf``, required), as a large training job does. Every job
checkpoints each ``--checkpoint-s`` (a victim loses the work since), and with ``--grace-s`` gets a
notice at preemption and keeps its work (ADR 0036; the lost work is then 0 by construction).
The profiles differ only by ``preempt: defrag`` (its default policy), and the third by
``room_elsewhere: false``. "Large" is a job of at least 8 GPUs (a whole node or more): the jobs
defrag moves others for.

    PYTHONPATH=src .venv/bin/python bench/defrag_philly.py [--jobs N] [--nodes N] [--leaves N]
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

if __package__ in (None, ""):  # run as a file (python bench/X.py): the checkout on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.defrag_traces import philly_workload, print_table, run
from bench.philly import DEFAULT_TRACE
from gpufleet.sim.engine import TraceJob
from gpufleet.sim.replay import ProfileChoice

BASE = ProfileChoice("fifo", "topology", "easy")
DEFRAG = replace(BASE, preempt=("defrag",))
# defrag that moves jobs with no room elsewhere too (its first default)
ANYWHERE = replace(DEFRAG, options={"preempt/defrag": {"room_elsewhere": False}})
# the figures this script prints: defrag_traces.figures less its job count and fragmentation
KEYS = (
    "large_jobs",
    "large_mean_wait_h",
    "large_median_wait_h",
    "large_p95_wait_h",
    "all_mean_wait_h",
    "unfinished",
    "preemptions",
    "lost_gpu_h",
    "wall_s",
)


def workload(trace: Path, limit: int) -> list[TraceJob]:
    """The slice, with each gang of several nodes asking for one leaf."""
    return philly_workload(trace, limit)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--leaves", type=int, default=4)
    ap.add_argument("--checkpoint-s", type=float, default=1800.0)
    ap.add_argument("--grace-s", type=float, default=None, help="notice for all (keeps work)")
    args = ap.parse_args()
    jobs = workload(args.trace, args.jobs)
    profiles = (
        (BASE.label, BASE),
        (DEFRAG.label, DEFRAG),
        (DEFRAG.label + " room_elsewhere=false", ANYWHERE),
    )
    out = {}
    for label, c in profiles:
        f = run(c, jobs, args)
        out[label] = {k: f[k] for k in KEYS}
    print_table(out)
    b, d = out[BASE.label], out[DEFRAG.label]
    if b["large_mean_wait_h"]:
        ratio = d["large_mean_wait_h"] / b["large_mean_wait_h"]
        print(f"large gangs' mean wait, defrag / base: {ratio:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
