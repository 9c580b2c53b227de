"""FGD fill experiment (ATC'23) on Alibaba's openb traces: ours vs. the published curves.

Runs policies x pod lists x seeds with ``gpufleet.sim.fill.run_fill`` and prints a Markdown table
of the allocation ratio at x=100 and x=130 (mean ± sd over seeds) next to the published mean at
the same x (``shared/reference/fgd_allocation_ratio.csv``) and the difference, plus the mean wall
seconds of one run.

    .venv/bin/python bench/fgd_fill.py --jobs 2 [--out FILE] [--csv-dir DIR]
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from gpufleet.sim.fill import POLICIES, SC_POLICY, SEEDS, FillResult, run_fill, write_csv
from gpufleet.sim.openb import load_nodes, load_pods

if __package__ in (None, ""):  # run as a file (python bench/X.py): the checkout on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.paths import SHARED

DEFAULT_TRACES_DIR = SHARED / "traces" / "alibaba-openb"
DEFAULT_REFERENCE = SHARED / "reference" / "fgd_allocation_ratio.csv"
NODE_FILE = "openb_node_list_gpu_node.csv"
DEFAULT_TRACES = ("default", "gpuspec20", "multigpu20")
BENCH_POLICIES = ("random", "dotprod", "gpuclustering", "gpupacking", "bestfit", "fgd")
XS = (100, 130)


def _run(args: tuple[str, str, str, int]) -> FillResult:
    traces_dir, trace, policy, seed = args
    d = Path(traces_dir)
    nodes = load_nodes(d / NODE_FILE)
    pods = load_pods(d / f"openb_pod_list_{trace}.csv")
    return run_fill(pods, nodes, policy, seed, workload=f"openb_pod_list_{trace}")


def _published(path: Path) -> dict[tuple[str, str, int], list[float]]:
    """(workload, sc_policy, x) → the published values over seeds."""
    out: dict[tuple[str, str, int], list[float]] = {}
    if not path.exists():
        return out
    with path.open(newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            for x in XS:
                v = row.get(str(x), "")
                if v:
                    out.setdefault((row["workload"], row["sc_policy"], x), []).append(float(v))
    return out


def _mean_sd(vals: list[float]) -> tuple[float, float]:
    return statistics.fmean(vals), (statistics.stdev(vals) if len(vals) > 1 else 0.0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policies", default=",".join(BENCH_POLICIES))
    ap.add_argument(
        "--traces",
        default=",".join(DEFAULT_TRACES),
        help="pod lists, as the part after openb_pod_list_",
    )
    ap.add_argument("--seeds", default=f"{SEEDS[0]}-{SEEDS[-1]}", help="e.g. 42-51 or 42,43")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes (at most 2)")
    ap.add_argument("--traces-dir", type=Path, default=DEFAULT_TRACES_DIR)
    ap.add_argument("--reference", type=Path, default=DEFAULT_REFERENCE)
    ap.add_argument("--out", type=Path, help="also write the table to this file")
    ap.add_argument("--csv-dir", type=Path, help="write our rows in the published CSV layout here")
    a = ap.parse_args(argv)

    policies = [p.strip() for p in a.policies.split(",") if p.strip()]
    for p in policies:
        if p not in POLICIES:
            ap.error(f"unknown policy {p!r}; choose from {', '.join(POLICIES)}")
    traces = [t.strip() for t in a.traces.split(",") if t.strip()]
    if "-" in a.seeds:
        lo, hi = a.seeds.split("-", 1)
        seeds = list(range(int(lo), int(hi) + 1))
    else:
        seeds = [int(s) for s in a.seeds.split(",")]
    jobs = max(1, min(2, a.jobs))
    if not (a.traces_dir / NODE_FILE).exists():
        ap.error(f"no {NODE_FILE} in {a.traces_dir}")

    tasks = [(str(a.traces_dir), t, p, s) for t in traces for p in policies for s in seeds]
    start = time.perf_counter()
    if jobs > 1:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            results = list(pool.map(_run, tasks))
    else:
        results = [_run(t) for t in tasks]
    elapsed = time.perf_counter() - start

    ref = _published(a.reference)
    lines = [
        "| trace | policy | ours x=100 | published | Δ | ours x=130 | published | Δ |"
        " failed pods | s/run |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for t in traces:
        wl = f"openb_pod_list_{t}"
        for p in policies:
            rs = [r for r in results if r.workload == wl and r.policy == p]
            cells = [t, SC_POLICY[p]]
            for x in XS:
                m, sd = _mean_sd([r.alloc[x] for r in rs])
                pub = ref.get((wl, SC_POLICY[p], x))
                if pub:
                    pm = statistics.fmean(pub)
                    cells += [f"{m:.2f} ± {sd:.2f}", f"{pm:.2f}", f"{m - pm:+.2f}"]
                else:
                    cells += [f"{m:.2f} ± {sd:.2f}", "–", "–"]
            cells.append(f"{statistics.fmean(r.pods_failed for r in rs):.0f}")
            cells.append(f"{statistics.fmean(r.wall_s for r in rs):.2f}")
            lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines.append(
        f"{len(results)} runs ({len(seeds)} seeds: {seeds[0]}–{seeds[-1]}), {jobs} process(es), "
        f"{elapsed:.0f} s wall in all."
    )
    table = "\n".join(lines)
    print(table)
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(table + "\n", encoding="utf-8")
    if a.csv_dir:
        a.csv_dir.mkdir(parents=True, exist_ok=True)
        write_csv(results, a.csv_dir / "fgd_allocation_ratio.csv", "alloc")
        write_csv(results, a.csv_dir / "fgd_fragmentation_ratio.csv", "frag")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
