"""`gpufleet bench placement` (users run it; its code is ``gpufleet.sim.placement_bench``): one
cycle over a small synthetic cluster, its figures as JSON."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from gpufleet.cli.bench import app


def test_placement_places_the_pending_jobs_of_a_roomy_cluster_and_says_so_as_json() -> None:
    args = ["placement", "--nodes", "20", "--jobs", "30", "--gangs", "2", "--leaves", "2"]
    r = CliRunner().invoke(app, [*args, "--repeats", "1", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert (out["nodes"], out["pending"]) == (20, 32)
    assert 0 < out["placed"] <= 32
    assert out["placements_per_s"] > 0


def test_placement_prints_a_table_with_the_target() -> None:
    args = ["placement", "--nodes", "4", "--jobs", "3", "--gangs", "0", "--leaves", "1"]
    r = CliRunner().invoke(app, [*args, "--repeats", "1"])
    assert r.exit_code == 0, r.output
    assert "placed/s" in r.output and "target 10000" in r.output
