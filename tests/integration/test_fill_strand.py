"""``fgd-strand`` in the fill experiment: above FGD's published means, one seed per pod list
(the 10-seed figures are in BENCHMARKS.md; ``bench/fgd_fill.py --policies fgd,fgd-strand``)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from gpufleet.sim.fill import run_fill

SHARED = Path(__file__).resolve().parents[2].parent / "shared"
TRACES = SHARED / "traces" / "alibaba-openb"
REFERENCE = SHARED / "reference" / "fgd_allocation_ratio.csv"
pytestmark = pytest.mark.skipif(
    not (TRACES / "openb_pod_list_default.csv").exists() or not REFERENCE.exists(),
    reason=f"openb traces or reference results not found under {SHARED}",
)


def fgd_published(workload: str, x: int) -> float:
    with REFERENCE.open(newline="") as fh:
        vals = [
            float(r[str(x)])
            for r in csv.DictReader(fh)
            if r["workload"] == workload and r["sc_policy"] == "06-FGD"
        ]
    assert len(vals) == 10
    return sum(vals) / len(vals)


# measured at 10 seeds: default 96.08, gpuspec20 95.86, multigpu20 96.15 (FGD: 95.23, 94.66,
# 95.53); one seed's value sits well within 0.2 of its mean (seed 42: 96.10, 95.86)
@pytest.mark.parametrize(("trace", "floor"), [("default", 96.0), ("gpuspec20", 95.7)])
def test_fgd_strand_allocates_more_than_fgd_at_x100(trace: str, floor: float) -> None:
    from gpufleet.sim.openb import load_nodes, load_pods

    wl = f"openb_pod_list_{trace}"
    pods = load_pods(TRACES / f"{wl}.csv")
    nodes = load_nodes(TRACES / "openb_node_list_gpu_node.csv")
    r = run_fill(pods, nodes, "fgd-strand", 42, workload=wl)
    assert r.sc_policy == "07-FGD-Strand"
    assert r.alloc[100] >= floor
    assert r.alloc[100] > fgd_published(wl, 100) + 0.4
    assert r.alloc[130] >= r.alloc[100]
