"""`gpufleet bench …`: the scheduler's speed and footprint (figures for BENCHMARKS.md)."""

from __future__ import annotations

import json
from typing import Any

import typer

from gpufleet.sim import placement_bench as pb

app = typer.Typer(no_args_is_help=True)


def _row(r: dict[str, Any]) -> str:
    pps = r["placements_per_s"]
    mpp = r["ms_per_placement"]
    return (
        f"{r.get('axis', ''):>5} {r['nodes']:>6} {r['pending']:>8} {r['placed']:>7} "
        f"{r['reasons']:>8} {1000 * r['cycle_s']:>9.1f} {1000 * (r['explain_s'] or 0):>9.1f} "
        f"{mpp if mpp is not None else '-':>9} {r['us_per_pending_job']:>8} "
        f"{pps if pps is not None else '-':>10}"
    )


HEADER = (
    f"{'':>5} {'nodes':>6} {'pending':>8} {'placed':>7} {'reasons':>8} {'ms/cycle':>9} "
    f"{'explain':>9} {'ms/place':>9} {'µs/job':>8} {'placed/s':>10}"
)


@app.command("placement")
def placement(
    nodes: int = typer.Option(5000, min=1, help="nodes in the cluster"),
    jobs: int = typer.Option(10_000, min=0, help="pending 1-GPU jobs"),
    gangs: int = typer.Option(2000, min=0, help="pending gangs of 2-64 GPUs"),
    leaves: int = typer.Option(40, min=1, help="leaf switches (8 to a pod)"),
    gpus_per_node: int = typer.Option(8, min=1, help="GPUs per node"),
    queues: int = typer.Option(8, min=1, help="fair-share queues"),
    seed: int = typer.Option(0, help="workload and profile seed"),
    busy: float = typer.Option(
        0.0, min=0.0, max=1.0, help="share of GPUs already held by running jobs"
    ),
    repeats: int = typer.Option(3, min=1, help="cycles timed; the median is reported"),
    scaling: bool = typer.Option(
        False,
        "--scaling",
        help="also time cycles at 500-5,000 nodes (at --jobs + --gangs pending) and over the "
        "grid 500-5,000 nodes × 1,000-100,000 pending jobs",
    ),
    as_json: bool = typer.Option(False, "--json", help="print JSON instead of a table"),
    place: str = typer.Option(
        "topology", "--placement", help="placement plugin of the headline cycle (not --scaling)"
    ),
) -> None:
    """One scheduling cycle (order=fairshare, place=topology, backfill=easy, reasons for every
    pending job) over a synthetic cluster; `placements_per_s` is jobs started per second of
    time inside run_cycle. The snapshot build is not timed."""
    head = pb.placement(
        nodes, jobs, gangs, leaves, gpus_per_node, queues, seed, repeats, busy, place
    )
    if not scaling:
        if as_json:
            print(json.dumps(head))
        else:
            print(HEADER)
            print(_row(head))
            print(
                f"placements/s: {head['placements_per_s']} (median of {repeats} cycles, "
                f"reasons included); target 10000"
            )
        return

    def progress(r: dict[str, Any]) -> None:
        if not as_json:
            print(_row(r), flush=True)

    if not as_json:
        print(f"headline: {head['placements_per_s']} placements/s")
        print(HEADER)
    table = pb.scaling(
        fixed_pending=jobs + gangs,
        leaves=leaves,
        gpus_per_node=gpus_per_node,
        queues=queues,
        seed=seed,
        repeats=repeats,
        busy=busy,
        progress=progress,
    )
    if as_json:
        print(json.dumps({"headline": head, **table}))
        return
    print("cost of one more pending job, at each node count (flat: no nodes × pending term):")
    for m in table["marginal"]:
        print(
            f"  {m['nodes']:>6} nodes, {m['pending_from']:,} → {m['pending_to']:,} pending: "
            f"{m['us_per_pending']} µs/job (CPU {m['cpu_us_per_pending']}, reasons "
            f"{m['explain_us_per_pending']}), "
            f"placed {m['delta_placed']:+}"
        )


@app.command("memory")
def memory(
    nodes: int = typer.Option(5000, min=1, help="nodes in the cluster"),
    pending: int = typer.Option(100_000, min=0, help="pending jobs (5:1 1-GPU jobs to gangs)"),
    leaves: int = typer.Option(40, min=1),
    gpus_per_node: int = typer.Option(8, min=1),
    queues: int = typer.Option(8, min=1),
    seed: int = typer.Option(0),
    busy: float = typer.Option(
        0.0, min=0.0, max=1.0, help="share of GPUs already held by running jobs"
    ),
    trace: bool = typer.Option(True, help="also measure the Python heap with tracemalloc"),
    as_json: bool = typer.Option(False, "--json", help="print JSON instead of text"),
) -> None:
    """The footprint of a cluster with many pending jobs: the snapshot and one cycle over it,
    as the process's resident memory (RSS, from /proc) and, with --trace, the Python heap."""
    out = pb.memory(nodes, pending, leaves, gpus_per_node, queues, seed, trace, busy)
    if as_json:
        print(json.dumps(out))
        return
    for k, v in out.items():
        print(f"{k:>24}: {v}")
    if not out["fits"]:
        raise typer.Exit(1)
