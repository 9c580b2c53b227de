"""A 16-run sweep over the Philly trace (issue 14): wall time in local processes against the
same 16 runs one after the other, through the same CLI command in the same session.

The grid: fifo and fairshare (topology placement, EASY backfill) × 32 and 48 nodes of 8 GPUs
(4 leaves) × seeds 1-4, with random node failures (per-node MTBF 30 days, 1 h repair) so that
the seeds differ; the trace's virtual clusters as equal-share queues, exact time limits. By
default the first 10,000 jobs of ``philly_dev.csv`` (a slice written to a temporary file, so the
command is the one a user runs): all 53,779 make 16 runs take many minutes on a 2-core box
(``--jobs 0`` runs them all).

It runs ``gpufleet simulate sweep … --workers N --json`` (default 2) and then the same with
``--workers 1`` (each run in the CLI's own process, one after the other), timing each process,
and checks that both give the same figures run by run (``wall_s`` aside). It prints the
command, both walls, their ratio, the CPU count and the load averages around each (other work
on the machine shows there).

    .venv/bin/python bench/sweep.py [--jobs 10000] [--workers 2]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file (python bench/X.py): the checkout on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.philly import DEFAULT_TRACE

GRID = [
    *("--profiles", "fifo+topology+easy,fairshare+topology+easy"),
    *("--nodes", "32,48", "--gpus-per-node", "8", "--leaves", "4", "--seeds", "1,2,3,4"),
    *("--mtbf", "2592000", "--repair", "3600", "--equal-shares", "--time-limit", "exact"),
]


def write_slice(trace: Path, jobs: int, folder: Path) -> Path:
    """The header and the first ``jobs`` rows (the trace is sorted by submission)."""
    out = folder / f"philly_first_{jobs}.csv"
    with trace.open(encoding="utf-8") as src, out.open("w", encoding="utf-8") as dst:
        for i, line in enumerate(src):
            if i > jobs:
                break
            dst.write(line)
    return out


def timed(cmd: list[str]) -> tuple[float, dict[str, Any], tuple[float, ...]]:
    load = os.getloadavg()
    start = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    if r.returncode != 0:
        raise SystemExit(f"{shlex.join(cmd)} failed ({r.returncode}):\n{r.stderr[-3000:]}")
    doc: dict[str, Any] = json.loads(r.stdout)
    return wall, doc, (*load, *os.getloadavg())


def _figures(doc: dict[str, Any]) -> list[dict[str, Any]]:
    runs = []
    for run in doc["runs"]:
        m = dict(run["metrics"])
        del m["wall_s"]
        runs.append({**run, "metrics": m})
    return runs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--jobs", type=int, default=10_000, help="the first N jobs (0: all)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=1, help="pairs of timings, alternated")
    args = ap.parse_args(argv)
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        trace = args.trace if args.jobs <= 0 else write_slice(args.trace, args.jobs, Path(tmp))
        base = [
            *(sys.executable, "-m", "gpufleet.cli.main", "simulate", "sweep"),
            *("--trace", str(trace), "--format", "philly", *GRID, "--json"),
        ]
        parallel = [*base, "--workers", str(args.workers)]
        sequential = [*base, "--workers", "1"]
        print(f"machine: {os.cpu_count()} CPUs; trace {args.trace.name}", end="")
        print(f", first {args.jobs:,} jobs" if args.jobs > 0 else ", all jobs")
        print(f"command: {shlex.join(parallel)}")
        for _ in range(args.repeat):
            p_wall, p_doc, p_load = timed(parallel)
            s_wall, s_doc, s_load = timed(sequential)
            same = _figures(p_doc) == _figures(s_doc)
            ok = ok and same and not p_doc["failed"]
            replay_s = sum(r["metrics"]["wall_s"] for r in s_doc["runs"])
            print(
                f"runs: {len(p_doc['runs'])}, failed: {p_doc['failed']}, "
                f"same figures both ways: {same}"
            )
            print(f"  --workers {args.workers}: {p_wall:.1f} s wall ({_load(p_load)})")
            print(
                f"  --workers 1: {s_wall:.1f} s wall ({_load(s_load)}); its replays' own "
                f"wall_s sum to {replay_s:.1f} s"
            )
            print(f"  sequential / parallel: {s_wall / p_wall:.2f}×")
    return 0 if ok else 1


def _load(load: tuple[float, ...]) -> str:
    return f"1-min load average {load[0]:.2f} before, {load[3]:.2f} after"


if __name__ == "__main__":
    raise SystemExit(main())
