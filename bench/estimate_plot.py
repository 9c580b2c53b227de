"""Job completion times and estimated starts' errors per policy, plotted: one replay per order
(``--orders``) through ``bench/estimate_accuracy.py``'s ``measure`` (the same profile otherwise:
topology + EASY, 64 × 8 GPUs, the virtual clusters as equal-share queues, exact time limits),
each in its own process; one figure (a PNG) with the CDF of each order's JCTs (every job of the
replay), of its |estimate − actual start| and of the signed error (the sampled jobs), and its
table printed.

    .venv/bin/python bench/estimate_plot.py [--jobs N] [--sample F]
        [--orders fifo,fairshare,las,sjf] [--out docs/benchmarks/estimate_errors.png]
        [--workers 2]
"""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

if __package__ in (None, ""):  # run as a file (python bench/X.py): the checkout on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.estimate_accuracy import Measured, fraction, measure, percentile
from bench.philly import DEFAULT_TRACE

H = 3600.0


def _one(args: tuple[Path, int | None, float, int, str]) -> Measured:
    return measure(*args)


def plot(runs: list[Measured], out: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (jct, cdf, signed) = plt.subplots(1, 3, figsize=(16, 4.4))
    for m in runs:
        js = sorted(x / H for x in m.jct)
        if js:
            jct.step(js, [(i + 1) / len(js) for i in range(len(js))], where="post", label=m.label)
        xs = sorted(e / H for v in m.errors.values() for e in v)
        if not xs:
            continue
        ys = [(i + 1) / len(xs) for i in range(len(xs))]
        cdf.step(xs, ys, where="post", label=f"{m.label} (n={len(xs)})")
        s = sorted(e / H for e in m.signed)
        signed.step(s, [(i + 1) / len(s) for i in range(len(s))], where="post", label=m.label)
    jct.set_xscale("log")
    jct.set_xlabel("job completion time (h)")
    jct.set_ylabel("fraction of jobs")
    jct.set_title("JCT CDF (every job)")
    jct.legend(fontsize=8)
    cdf.axvline(0.5, color="grey", lw=0.8, ls="--")
    cdf.set_xscale("symlog", linthresh=0.1)
    cdf.set_xlabel("|estimated − actual start| (h)")
    cdf.set_ylabel("fraction of jobs")
    cdf.set_title("error CDF")
    cdf.legend(fontsize=8)
    signed.axvline(0.0, color="grey", lw=0.8)
    signed.set_xscale("symlog", linthresh=0.1)
    signed.set_xlabel("actual − estimated start (h; < 0: started early)")
    signed.set_title("signed error CDF")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--sample", type=fraction, default=0.1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--orders", default="fifo,fairshare,las,sjf")
    ap.add_argument("--out", type=Path, default=Path("docs/benchmarks/estimate_errors.png"))
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args()
    orders = [o.strip() for o in a.orders.split(",") if o.strip()]
    todo = [(a.trace, a.jobs, a.sample, a.seed, o) for o in orders]
    with ProcessPoolExecutor(max_workers=a.workers) as pool:
        runs = list(pool.map(_one, todo))
    print(
        "| order | mean JCT | p99 JCT | jobs | median |err| | p90 |err| | mean |err| "
        "| in 80 % band | early |"
    )
    print("|---|--:|--:|--:|--:|--:|--:|--:|--:|")
    for m in runs:
        xs = [e for v in m.errors.values() for e in v]
        if not xs:
            continue
        band = f"{100 * m.within / m.banded:.1f} % of {m.banded}" if m.banded else "—"
        js = m.jct or [0.0]
        print(
            f"| {m.label} | {sum(js) / len(js) / H:.2f} h | {percentile(js, 0.99) / H:.1f} h | "
            f"{len(xs):,} | {percentile(xs, 0.5) / H:.2f} h | "
            f"{percentile(xs, 0.9) / H:.2f} h | {sum(xs) / len(xs) / H:.2f} h | {band} | "
            f"{m.early:,} |"
        )
    jobs = f"first {a.jobs:,}" if a.jobs else "all"
    plot(runs, a.out, f"estimated starts, Philly ({jobs} jobs, {a.sample:g} sample), 64 × 8 GPUs")
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
