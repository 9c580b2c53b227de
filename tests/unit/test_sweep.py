"""``gpufleet simulate sweep``: the grid, the options' problems, the aggregation over seeds, and
the runners: local processes give what one run after the other in this process gives, and what
``simulate replay`` gives for the same profile, nodes and seed."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpufleet.cli.simulate import app
from gpufleet.model.errors import SpecError
from gpufleet.sim.engine import NodeFailure, SimConfig
from gpufleet.sim.replay import ProfileChoice, uniform_cluster
from gpufleet.sim.sweep import (
    InProcess,
    LocalProcesses,
    Point,
    RunResult,
    Spread,
    SweepWorkload,
    aggregate,
    check_failures,
    clusters_for,
    grid,
    parse_counts,
    run_point,
    seeds_matter,
    sweep_json,
)
from gpufleet.sim.traces import TimeLimit, apply_time_limits, load_trace

FIFO = ProfileChoice("fifo", "bestfit", "easy")
RANDOM = ProfileChoice("sjf", "random", "easy")


def jobs_file(tmp_path: Path) -> Path:
    """Twenty jobs of 1 to 8 GPUs arriving over 10 minutes: enough to queue on 2 nodes."""
    p = tmp_path / "jobs.jsonl"
    rows = [
        {
            "id": f"j{i}",
            "submit_time": 30.0 * i,
            "duration_s": 200.0 + 37.0 * (i % 7),
            "gpus_per_worker": (1, 2, 4, 8)[i % 4],
            "queue": ("a", "b")[i % 2],
        }
        for i in range(20)
    ]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p


def workload(tmp_path: Path, capacities: tuple[int, ...] = (1, 2)) -> SweepWorkload:
    jobs = apply_time_limits(load_trace(jobs_file(tmp_path), "jobs"), TimeLimit("exact"))
    base = uniform_cluster(capacities[0], 8)
    clusters, problems = clusters_for(base, capacities, uniform=(8, 1))
    assert not problems
    # random failures make the seed matter beside random placement
    return SweepWorkload(jobs, SimConfig(mtbf_s=1500.0, repair_s=120.0), clusters)


def figures(r: RunResult) -> dict[str, Any]:
    assert r.metrics is not None, r.error
    m = r.metrics.to_json()
    del m["wall_s"]  # the one figure that is the machine's, not the replay's
    return m


# ---------------------------------------------------------------------------------------------
# the grid and the options


def test_the_grid_is_the_cross_product_profile_major() -> None:
    points = grid([FIFO, RANDOM], [16, 32], [1, 2, 3])
    assert len(points) == 12
    assert points[0] == Point(FIFO, 16, 1) and points[2] == Point(FIFO, 16, 3)
    assert points[3] == Point(FIFO, 32, 1) and points[-1] == Point(RANDOM, 32, 3)
    assert points[-1].label == "sjf+random+easy on 32 nodes, seed 3"


def test_counts_are_parsed_and_every_problem_is_named() -> None:
    assert parse_counts("16, 32,64", "--nodes", minimum=1) == ([16, 32, 64], [])
    values, problems = parse_counts("16,x,0,16,,", "--nodes", minimum=1)
    assert values == [16]
    assert [p.field for p in problems] == ["--nodes"] * 5
    reasons = " | ".join(p.reason for p in problems)
    for words in ("'x' is not a whole number", "0 is less than 1", "16 is named twice", "empty"):
        assert words in reasons
    assert parse_counts(" ", "--seeds", minimum=0)[1][0].reason == "give at least one value"


def test_each_capacity_is_laid_out_as_replay_or_resized_from_a_file() -> None:
    base = uniform_cluster(4, 8, 2)
    same, problems = clusters_for(base, [4, 6, 1], uniform=(8, 2))
    assert [str(p) for p in problems] == [
        "--leaves: with --nodes 1: must be 1 to the number of nodes (1), got 2"
    ]
    assert same[4] == base and len(same[6].nodes) == 6
    assert {n.leaf for n in same[6].nodes} == {"leaf-0", "leaf-1"}  # spread, as replay does
    resized, problems = clusters_for(base, [2, 6], uniform=None)
    assert not problems
    assert [n.name for n in resized[6].nodes][-2:] == ["whatif-0000", "whatif-0001"]
    assert resized[2].nodes == base.nodes[:2]


def test_scripted_failures_must_name_a_node_of_every_capacity() -> None:
    clusters, _ = clusters_for(uniform_cluster(4, 8), [2, 4], uniform=(8, 1))
    config = SimConfig(failures=[NodeFailure(10.0, "node-003", 60.0)])
    (problem,) = check_failures(config, clusters)
    assert problem.field == "--nodes" and "2 nodes has no node node-003" in problem.reason


def test_seeds_matter_only_with_random_placement_or_failures() -> None:
    assert not seeds_matter([FIFO], SimConfig())
    assert seeds_matter([FIFO, RANDOM], SimConfig())
    assert seeds_matter([FIFO], SimConfig(mtbf_s=100.0))


def test_bad_options_are_reported_all_at_once(tmp_path: Path) -> None:
    r = CliRunner().invoke(
        app,
        [
            *("sweep", "--trace", str(jobs_file(tmp_path)), "--format", "jobs"),
            *("--profiles", "fifo,nosuch", "--order", "fifo", "--nodes", "2,zero"),
            *("--seeds", "1,1", "--workers", "0", "--out", str(tmp_path / "no" / "x.csv")),
            *("--leaves", "3", "--time-limit", "soon"),
        ],
    )
    assert r.exit_code == 2
    message = " ".join(r.output.split())
    for words in (
        "--profiles: 'nosuch' must start with an order",
        "--profiles: fifo+bestfit+easy named twice",
        "--nodes: 'zero' is not a whole number",
        "--seeds: 1 is named twice",
        "--workers: must be at least 1, got 0",
        "--out: no folder",
        "--leaves: with --nodes 2: must be 1 to the number of nodes (2), got 3",
        "--time-limit:",
    ):
        assert words in message, message
    r = CliRunner().invoke(
        app, ["sweep", "--trace", "t.csv", "--format", "nope", "--order", "fifo", "--nodes", "1"]
    )
    assert r.exit_code == 2 and "--format: must be one of philly" in " ".join(r.output.split())


# ---------------------------------------------------------------------------------------------
# over seeds


def test_spread_is_the_mean_and_sample_deviation() -> None:
    s = Spread.of([1.0, 2.0, 3.0, 6.0])
    assert (s.mean, s.min, s.max) == (3.0, 1.0, 6.0)
    assert math.isclose(s.std, math.sqrt((4 + 1 + 0 + 9) / 3))
    assert Spread.of([5.0]) == Spread(5.0, 0.0, 5.0, 5.0)


def test_aggregates_group_by_profile_and_capacity_and_leave_failures_out(
    tmp_path: Path,
) -> None:
    wl = workload(tmp_path)
    points = grid([FIFO, RANDOM], [1, 2], [1, 2])
    results = InProcess().run(wl, points)
    failed = RunResult(Point(FIFO, 1, 3), error="boom")
    aggs = aggregate([*results, failed])
    assert [(a.profile, a.nodes, a.runs, a.failed) for a in aggs] == [
        ("fifo+bestfit+easy", 1, 3, 1),
        ("fifo+bestfit+easy", 2, 2, 0),
        ("sjf+random+easy", 1, 2, 0),
        ("sjf+random+easy", 2, 2, 0),
    ]
    for a, pair in zip(aggs, [results[0:2], results[2:4], results[4:6], results[6:8]], strict=True):
        for key in ("avg_jct_s", "utilization", "makespan_s"):
            values = [float(getattr(r.metrics, key)) for r in pair]
            assert a.figures[key] == Spread.of(values)
    doc = sweep_json([*results, failed])
    assert doc["failed"] == 1 and doc["runs"][-1] == {
        "profile": "fifo+bestfit+easy",
        "nodes": 1,
        "seed": 3,
        "error": "boom",
    }
    assert doc["aggregates"][0]["avg_jct_s"]["mean"] == round(aggs[0].figures["avg_jct_s"].mean, 6)


# ---------------------------------------------------------------------------------------------
# the runners


def test_local_processes_equal_one_run_after_the_other(tmp_path: Path) -> None:
    wl = workload(tmp_path)
    points = grid([FIFO, RANDOM], [1, 2], [1, 2])
    seen: list[Point] = []
    local = LocalProcesses(2).run(wl, points, lambda r: seen.append(r.point))
    here = InProcess().run(wl, points)
    assert [r.point for r in local] == points and sorted(seen, key=points.index) == points
    assert [figures(r) for r in local] == [figures(r) for r in here]
    # the seed reaches the replay: random placement and failures differ between seeds
    assert figures(here[4]) != figures(here[5])


def test_a_failed_run_is_reported_and_the_others_kept(tmp_path: Path) -> None:
    wl = workload(tmp_path, capacities=(1,))
    points = [Point(FIFO, 1, 0), Point(FIFO, 3, 0), Point(RANDOM, 1, 0)]  # no cluster of 3
    results = LocalProcesses(2).run(wl, points)
    assert [r.ok for r in results] == [True, False, True]
    assert results[1].error == "KeyError: 3"
    assert figures(results[0]) == figures(run_point(wl, points[0]))


def test_a_sweep_row_is_what_replay_gives(tmp_path: Path) -> None:
    trace = jobs_file(tmp_path)
    common = ["--trace", str(trace), "--format", "jobs", "--mtbf", "1500", "--repair", "120"]
    r = CliRunner().invoke(
        app,
        [
            *("sweep", *common, "--profiles", "sjf+random", "--nodes", "1,2"),
            *("--seeds", "4,5", "--workers", "2", "--json"),
        ],
    )
    assert r.exit_code == 0, r.output
    runs = json.loads(r.stdout)["runs"]
    assert [(x["nodes"], x["seed"]) for x in runs] == [(1, 4), (1, 5), (2, 4), (2, 5)]
    one = CliRunner().invoke(
        app,
        [
            *("replay", *common, "--order", "sjf", "--placement", "random"),
            *("--nodes", "2", "--seed", "5", "--json"),
        ],
    )
    assert one.exit_code == 0, one.output
    replayed = json.loads(one.stdout)
    del replayed["wall_s"], runs[3]["metrics"]["wall_s"]
    assert runs[3]["metrics"] == replayed


def test_ray_is_imported_only_with_ray_and_its_absence_is_said(tmp_path: Path) -> None:
    trace = jobs_file(tmp_path)
    code = (
        "import sys\n"
        "sys.modules['ray'] = None  # ImportError on import: as if not installed\n"
        "from gpufleet.cli.main import app\n"
        "def run(*extra):\n"
        "    try:\n"
        f"        app(['simulate', 'sweep', '--trace', {str(trace)!r}, '--format', 'jobs',\n"
        "             '--order', 'fifo', '--nodes', '2', '--json', *extra])\n"
        "    except SystemExit as e:\n"
        "        return e.code\n"
        "print('local', run('--workers', '1'))\n"
        "print('ray', run('--ray', '127.0.0.1:1'))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    lines = r.stdout.splitlines()
    assert lines[-2:] == ["local 0", "ray 2"], r.stdout + r.stderr
    assert "--ray: Ray is not installed here: pip install 'gpufleet[ray]'" in r.stderr


def test_problems_carry_every_message() -> None:
    from gpufleet.sim.sweep import Problems

    e = Problems([SpecError("a", field="--x"), SpecError("b", field="--y")])
    assert str(e) == "--x: a; --y: b" and len(e.problems) == 2


@pytest.mark.parametrize("suffix", [".csv", ".json"])
def test_out_writes_the_runs(tmp_path: Path, suffix: str) -> None:
    out = tmp_path / f"sweep{suffix}"
    r = CliRunner().invoke(
        app,
        [
            *("sweep", "--trace", str(jobs_file(tmp_path)), "--format", "jobs"),
            *("--order", "fifo", "--order", "sjf", "--nodes", "1,2", "--workers", "1"),
            *("--out", str(out)),
        ],
    )
    assert r.exit_code == 0, r.output
    assert "fifo+bestfit+easy" in r.stdout and "over the seeds" in r.stdout
    text = out.read_text()
    if suffix == ".csv":
        lines = text.splitlines()
        assert lines[0] == (
            "profile,nodes,seed,avg_jct_s,p95_jct_s,avg_wait_s,utilization,makespan_s,error"
        )
        assert len(lines) == 5 and lines[1].startswith("fifo+bestfit+easy,1,0,")
    else:
        doc = json.loads(text)
        assert len(doc["runs"]) == 4 and len(doc["aggregates"]) == 4 and doc["failed"] == 0
