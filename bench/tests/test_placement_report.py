"""bench/placement.py: the Markdown tables BENCHMARKS.md takes from `gpufleet bench` runs."""

from __future__ import annotations

from typing import Any

from bench.placement import marginal_table, median_row, table
from gpufleet.sim import placement_bench as pb


def test_the_median_run_is_kept_whole() -> None:
    rows = [{"cycle_s": s, "run": i} for i, s in enumerate([0.3, 0.1, 0.2])]
    assert median_row(rows) == {"cycle_s": 0.2, "run": 2}


def test_a_real_measurement_makes_one_table_row_per_run() -> None:
    row: dict[str, Any] = pb.placement(nodes=8, jobs=10, gangs=1, leaves=1, repeats=1)
    lines = table([row, row]).splitlines()
    assert len(lines) == 4  # header, rule, two rows
    assert lines[2].startswith("| 8 | 11 | 0 |")


def test_the_marginal_table_signs_the_change_in_placed_jobs() -> None:
    m = {
        "nodes": 500,
        "pending_from": 1000,
        "pending_to": 10_000,
        "delta_ms": 12.5,
        "us_per_pending": 1.389,
        "cpu_us_per_pending": 1.2,
        "explain_us_per_pending": 0.4,
        "delta_placed": 0,
    }
    assert marginal_table([m]).splitlines()[2] == (
        "| 500 | 1,000 → 10,000 | 12.5 | 1.39 | 1.20 | 0.40 | +0 |"
    )


def test_the_headline_cycle_takes_another_placement_plugin() -> None:
    default = pb.placement(nodes=8, jobs=10, gangs=1, leaves=1, repeats=1)
    row = pb.placement(nodes=8, jobs=10, gangs=1, leaves=1, repeats=1, place="fgd-strand")
    assert default["profile"]["place"] == "topology"
    assert row["profile"]["place"] == "fgd-strand"
    assert row["placed"] == default["placed"] > 0  # the same jobs fit; only where differs
