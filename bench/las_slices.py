"""LAS against FIFO and the SJF oracle on Philly slices at 16 nodes × 8 GPUs (issue 24).

Each slice is the rows of ``philly_dev.csv`` submitted in a window of days, of some virtual
clusters (all when none are named), replayed as ``gpufleet simulate replay --format philly
--nodes 16 --gpus-per-node 8 --leaves 2 --placement topology --backfill easy --preempt order
--equal-shares`` replays that slice's CSV (the same loader: submit times from its first job,
exact time limits), once per order. Prints a Markdown table per LAS order (``las``: Tiresias'
2D-LAS; ``las-history``: with the history predictor, ADR 0038) of mean and p99 JCT, the ratios
to FIFO and to SJF on mean JCT, p99 to FIFO's, and the LAS order's preemptions and lost GPU-h.

``--checkpoint-on-preempt``: every preempted job saves its state and resumes there (Tiresias'
premise); without it a preempted job restarts from zero (the simulator's default since
f3a1494). ``--preempt-grace-s G``: every job declares a checkpoint notice of G s (issue 25): a
preempted job saves its state too, but holds its GPUs for G s first (the preemptor waits).
``--checkpoint-interval S``: every job checkpoints every S s (a preempted one keeps its
last); the simulator reports each, and victims are chosen by the work since. ``--write DIR``
also writes each slice's CSV there (for the CLI); ``--plot DIR`` draws each slice's JCT CDFs
per order (``jct_cdf-SLICE.png``, matplotlib). ``--las-options JSON``: options of the LAS
orders (``order/las``'s, e.g. ``{"age_limit_s": 540000, "aged_share": 0.35, "min_run_s":
43200}``, the tail options of issue 24's nov-late figures; ``"aged_by": "remaining"`` and
``"aged_slack": K`` too, ADR 0056; ``"fifo_slack"``, ``"fifo_floor_q"``, ``"kept"``, its
amendment by h-las2).

    PYTHONPATH=src .venv/bin/python bench/las_slices.py [--slices A,B] [--checkpoint-on-preempt]
        [--preempt-grace-s G] [--checkpoint-interval S] [--orders las,las-history] [--plot DIR]
        [--las-options JSON]
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):  # run as a file (python bench/X.py): the checkout on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.philly import DEFAULT_TRACE
from gpufleet.sim.engine import SimConfig
from gpufleet.sim.replay import (
    ProfileChoice,
    ReplayRun,
    equal_share_queues,
    run_replay,
    uniform_cluster,
    with_queues,
)
from gpufleet.sim.traces import TimeLimit, apply_time_limits, load_trace


@dataclass(frozen=True)
class Slice:
    first: str  # first and last day of submission, inclusive (a prefix of the timestamp)
    last: str
    clusters: frozenset[str] = frozenset()  # the virtual clusters; empty: all

    def keeps(self, row: dict[str, str]) -> bool:
        day = row["timestamp"][:10]
        inside = self.first <= day <= self.last
        return inside and (not self.clusters or row["cluster"] in self.clusters)


LONG_VCS = frozenset({"ee9e8c", "ed69ec", "7f04ca", "2869ce", "e13805"})
SMALL_VCS = frozenset({"0e4a51", "103959", "ed69ec", "e13805"})
SLICES = {
    "sep": Slice("2017-09-01", "2017-09-30"),  # the month: 4,388 jobs
    "nov-late": Slice("2017-11-15", "2017-11-30"),  # 6,519 jobs
    "oct": Slice("2017-10-01", "2017-10-31"),  # the month: 34,040 jobs
    "nov": Slice("2017-11-01", "2017-11-30"),  # the month: 15,351 jobs
    "vc-long": Slice("2017", "2018", LONG_VCS),  # five VCs of long jobs, whole trace: 3,574
    # the regression test's until fe1c7e8
    "nov-25-30": Slice("2017-11-25", "2017-11-30"),
    "oct-25-26": Slice("2017-10-25", "2017-10-26"),
    "oct-vc-small": Slice("2017-10-01", "2017-10-31", SMALL_VCS),
    # the regression test's (tests/integration/test_las_quality.py)
    "sep-25-26": Slice("2017-09-25", "2017-09-26"),
    "oct-26": Slice("2017-10-26", "2017-10-26"),
    "nov-29-30": Slice("2017-11-29", "2017-11-30"),
    "vc-7f04ca-2869ce": Slice("2017", "2018", frozenset({"7f04ca", "2869ce"})),
    "oct-16-31-vc-small": Slice("2017-10-16", "2017-10-31", SMALL_VCS),
}
BASES = ("fifo", "sjf")


def write_slice(trace: Path, s: Slice, out: Path) -> int:
    with trace.open(newline="") as fh:
        reader = csv.DictReader(fh)
        rows = [r for r in reader if s.keeps(r)]
        header = list(reader.fieldnames or ())
    with out.open("w", newline="") as fh:
        w = csv.DictWriter(fh, header)
        w.writeheader()
        w.writerows(rows)
    return len(rows)


def replay(
    path: Path, cfg: SimConfig, orders: Sequence[str], options: dict[str, object] | None = None
) -> dict[str, ReplayRun]:
    """Each order's replay of the slice at ``path``; ``options`` go to the LAS orders."""
    jobs = apply_time_limits(load_trace(path, "philly"), TimeLimit("exact"))
    cluster = with_queues(uniform_cluster(16, 8, 2), equal_share_queues(jobs))

    def choice(o: str) -> ProfileChoice:
        opts = {f"order/{o}": options} if options and o not in BASES else {}
        return ProfileChoice(o, "topology", "easy", ("order",), options=opts)

    return {o: run_replay(cluster, jobs, choice(o), cfg) for o in (*BASES, *orders)}


def row(name: str, jobs: int, order: str, runs: dict[str, ReplayRun]) -> str:
    m = {o: r.metrics for o, r in runs.items()}
    las, fifo, sjf = (m[o].avg_jct_s or 0.0 for o in (order, "fifo", "sjf"))
    p99 = {o: (m[o].p99_jct_s or 0.0) / 1e6 for o in (order, *BASES)}
    return (
        f"| {name} | {order} | {jobs:,} | {las / fifo:.3f} | {las / sjf:.3f} | "
        f"{p99[order] / p99['fifo']:.3f} | {las / 3600:.1f} / {fifo / 3600:.1f} / "
        f"{sjf / 3600:.1f} h | {p99[order]:.2f} / {p99['fifo']:.2f} / {p99['sjf']:.2f} M s | "
        f"{m[order].preemptions:,} | {m[order].lost_gpu_hours_preemption:,.0f} |"
    )


def plot(runs: dict[str, ReplayRun], out: Path) -> None:
    from gpufleet.sim.report import jct_cdf_figure, png_bytes

    out.write_bytes(png_bytes(jct_cdf_figure(list(runs.values()))))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--slices", default="sep,nov-late,vc-long", help=", ".join(SLICES))
    ap.add_argument("--checkpoint-on-preempt", action="store_true")
    ap.add_argument("--preempt-grace-s", type=float, default=None)
    ap.add_argument("--checkpoint-interval", type=float, default=None, help="seconds, every job")
    ap.add_argument("--write", type=Path, help="write each slice's CSV here")
    ap.add_argument("--orders", default="las,las-history", help="the LAS orders to measure")
    ap.add_argument("--plot", type=Path, help="write each slice's JCT CDFs here")
    ap.add_argument("--las-options", type=json.loads, help="the LAS orders' options, JSON")
    args = ap.parse_args()
    cfg = SimConfig(
        checkpoint_on_preempt=args.checkpoint_on_preempt,
        preempt_grace_s=args.preempt_grace_s,
        checkpoint_interval_s=args.checkpoint_interval,
    )
    orders = [o for o in args.orders.split(",") if o]
    print(
        "| slice | order | jobs | ÷ FIFO mean | ÷ SJF mean | p99 ÷ FIFO's | mean JCT order / "
        "FIFO / SJF | p99 JCT order / FIFO / SJF | preemptions | lost GPU-h |"
    )
    print("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.slices.split(","):
            out = (args.write or Path(tmp)) / f"{name}.csv"
            out.parent.mkdir(parents=True, exist_ok=True)
            jobs = write_slice(args.trace, SLICES[name], out)
            runs = replay(out, cfg, orders, args.las_options)
            for o in orders:
                print(row(name, jobs, o, runs), flush=True)
            if args.plot:
                args.plot.mkdir(parents=True, exist_ok=True)
                plot(runs, args.plot / f"jct_cdf-{name}.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
