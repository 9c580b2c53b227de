"""Placement benchmark of issue 2: the figures of BENCHMARKS.md, "Placement (issue 2)".

Runs each measurement as its own `gpufleet bench …` process (so RSS figures start clean), repeats
it, takes the median, and prints the Markdown tables:

* the headline, `gpufleet bench placement --nodes 5000 --jobs 10000 --json`;
* the cluster half and nine-tenths busy with running jobs (`--busy 0.5`, `--busy 0.9`);
* scaling, `gpufleet bench placement --scaling --repeats 5 --json` (nodes at 12,000 pending,
  and the grid nodes × pending), with the marginal cost of a pending job at each node count;
* memory, `gpufleet bench memory --json` (5,000 nodes, 100,000 pending).

    .venv/bin/python bench/placement.py [--runs 3] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from typing import Any

from gpufleet.sim import placement_bench as pb

HEADLINE = ["placement", "--nodes", "5000", "--jobs", "10000", "--json"]
SCALING = ["placement", "--scaling", "--repeats", "5", "--json"]


def run(args: list[str]) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "gpufleet.cli.main", "bench", *args]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return dict(json.loads(out))


def median_row(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The run whose cycle time is the median (its other fields stay consistent with it)."""
    ordered = sorted(rows, key=lambda r: r["cycle_s"])
    return ordered[len(ordered) // 2]


def ms(s: float | None) -> str:
    return "-" if s is None else f"{1000 * s:.1f}"


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        "| nodes | pending | GPUs busy before | placed (jobs) | placed GPUs | reasons | "
        "ms / cycle | CPU ms | of which reasons | ms / placement | µs / pending job | "
        "placements/s |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
    )
    body = "".join(
        f"| {r['nodes']:,} | {r['pending']:,} | {r['busy_gpus']:,} | {r['placed']:,} | "
        f"{r['placed_gpus']:,} | "
        f"{r['reasons']:,} | {ms(r['cycle_s'])} | {ms(r['cpu_s'])} | {ms(r['explain_s'])} | "
        f"{r['ms_per_placement']} | {r['us_per_pending_job']} | "
        f"{r['placements_per_s']:,.0f} |\n"
        for r in rows
    )
    return head + body


def marginal_table(rows: list[dict[str, Any]]) -> str:
    out = (
        "| nodes | pending from → to | Δ ms / cycle | µs per extra pending job | CPU µs | of "
        "which reasons | Δ placed |\n|---:|---|---:|---:|---:|---:|---:|\n"
    )
    for m in rows:
        out += (
            f"| {m['nodes']:,} | {m['pending_from']:,} → {m['pending_to']:,} | "
            f"{m['delta_ms']} | {m['us_per_pending']:.2f} | {m['cpu_us_per_pending']:.2f} | "
            f"{m['explain_us_per_pending']:.2f} | {m['delta_placed']:+,} |\n"
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3, help="runs of each command (median kept)")
    ap.add_argument("--quick", action="store_true", help="headline and memory only")
    a = ap.parse_args()
    env = f"{os.cpu_count()} cores, Python {platform.python_version()}"
    print(f"<!-- measured on {env}; load average at start {os.getloadavg()[0]:.1f} -->\n")

    heads = [run(HEADLINE) for _ in range(a.runs)]
    h = median_row(heads)
    print("Headline: `gpufleet bench placement --nodes 5000 --jobs 10000 --json`")
    each = ", ".join(f"{r['placements_per_s']:,.0f}" for r in heads)
    print(f"(runs: {each} placements/s; median {h['placements_per_s']:,.0f})\n")
    rows = [h]
    if not a.quick:
        for busy in ("0.5", "0.9"):
            rows.append(median_row([run([*HEADLINE, "--busy", busy]) for _ in range(a.runs)]))
    print(table(rows))
    if not a.quick:
        scal = [run(SCALING) for _ in range(a.runs)]
        nodes = [median_row([s["nodes"][i] for s in scal]) for i in range(len(scal[0]["nodes"]))]
        grid = [median_row([s["grid"][i] for s in scal]) for i in range(len(scal[0]["grid"]))]
        print("Nodes at 12,000 pending (10,000 1-GPU jobs + 2,000 gangs):\n")
        print(table(nodes))
        top = max(r["nodes"] for r in grid)
        print(f"Pending jobs at {top:,} nodes (5:1 1-GPU jobs to gangs):\n")
        print(table([r for r in grid if r["nodes"] == top]))
        print("Grid nodes × pending:\n")
        print(table(grid))
        print("Marginal cost of a pending job at each node count:\n")
        print(marginal_table(pb.marginals(grid)))
    mem = [run(["memory", "--json"]) for _ in range(a.runs)]
    m = sorted(mem, key=lambda r: r["rss_peak_mib"])[len(mem) // 2]
    print("Memory: `gpufleet bench memory --json` (5,000 nodes, 100,000 pending)\n")
    print(
        "| RSS before | after snapshot | after cycle | peak RSS | Python heap: snapshot | "
        "cycle peak above it | result kept |\n|---:|---:|---:|---:|---:|---:|---:|\n"
        f"| {m['rss_before_mib']} MiB | {m['rss_after_snapshot_mib']} MiB | "
        f"{m['rss_after_cycle_mib']} MiB | {m['rss_peak_mib']} MiB | "
        f"{m['traced_snapshot_mib']} MiB | {m['traced_cycle_peak_mib']} MiB | "
        f"{m['traced_result_mib']} MiB |\n"
    )
    print(f"(peak RSS per run: {', '.join(str(r['rss_peak_mib']) for r in mem)} MiB)")
    print(f"<!-- load average at end {os.getloadavg()[0]:.1f} -->")


if __name__ == "__main__":
    main()
