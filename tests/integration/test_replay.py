"""Replays of Tiresias' 60_job.csv against hand-worked schedules, determinism, and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpufleet.cli.simulate import app
from gpufleet.sim.engine import SimConfig, TraceJob
from gpufleet.sim.metrics import SUMMARY_KEYS
from gpufleet.sim.replay import ProfileChoice, ReplayRun, run_replay, uniform_cluster
from gpufleet.sim.traces import TimeLimit, apply_time_limits, load_trace

TRACES = Path(__file__).resolve().parents[2].parent / "shared" / "traces"
SIXTY = TRACES / "tiresias" / "60_job.csv"
pytestmark = pytest.mark.skipif(not SIXTY.exists(), reason=f"{SIXTY} not found")

# The first ten jobs of 60_job.csv (id: GPUs, submit s, duration s):
#   0: 1, 0, 164     1: 8, 30, 147    2: 2, 53, 127    3: 1, 79, 121    4: 4, 99, 121
#   5: 8, 132, 138   6: 1, 176, 121   7: 2, 204, 124   8: 2, 227, 155   9: 1, 252, 126
# on one node of 8 GPUs; time limits = durations (exact).


def jobs(n: int | None = None) -> list[TraceJob]:
    return apply_time_limits(load_trace(SIXTY, "tiresias"), TimeLimit("exact"))[:n]


def schedule(run: ReplayRun) -> dict[str, tuple[float | None, float | None]]:
    return {r.id: (r.first_start, r.end_time) for r in run.rows}


def test_fifo_strict_order_by_hand() -> None:
    # t=0    0 starts (ends 164). 1 needs all 8 GPUs: it waits, and strict FIFO holds 2.. behind it.
    # t=164  0 ends; 1 starts (ends 311).
    # t=311  2, 3, 4 start (7 GPUs; ends 438, 432, 432); 5 needs 8: the head again.
    # t=432  3 and 4 end (6 free, not 8); t=438 2 ends, 5 starts (ends 576).
    # t=576  6, 7, 8, 9 start (6 GPUs): ends 697, 700, 731, 702.
    run = run_replay(uniform_cluster(1, 8), jobs(10), ProfileChoice("fifo", "bestfit", "none"))
    assert schedule(run) == {
        "0": (0, 164),
        "1": (164, 311),
        "2": (311, 438),
        "3": (311, 432),
        "4": (311, 432),
        "5": (438, 576),
        "6": (576, 697),
        "7": (576, 700),
        "8": (576, 731),
        "9": (576, 702),
    }
    m = run.metrics
    assert m.makespan_s == 731 and m.preemptions == 0 and m.never_schedulable == 0
    # lower bound: Σ g·d / 8 = (164 + 1176 + 254 + 121 + 484 + 1104 + 121 + 248 + 310 + 126) / 8
    # = 4,108 / 8 = 513.5 s (more than the longest job, 164 s)
    assert m.makespan_lower_bound_s == pytest.approx(513.5)


def test_fifo_easy_backfill_by_hand() -> None:
    # As above until t=311, when 5 (8 GPUs) is the blocked head and reserves the node from
    # t=438 (when 2 ends). 6 (1 GPU, 121 s) fits the one free GPU and ends at 432 <= 438: it
    # backfills. At 432, 7 (2 GPUs) would end at 556 > 438: it waits. The rest as before.
    run = run_replay(uniform_cluster(1, 8), jobs(10), ProfileChoice("fifo", "bestfit", "easy"))
    s = schedule(run)
    assert s["6"] == (311, 432)
    assert s["5"] == (438, 576)
    assert (s["7"], s["8"], s["9"]) == ((576, 700), (576, 731), (576, 702))


def test_las_with_preemption_by_hand() -> None:
    # LAS with one threshold at 500 GPU-s, preempting by its own rule, strict order. LAS decides
    # at scheduling events (arrivals and ends), so a job is preempted at the first event after
    # its attained service crosses the threshold, not at the crossing itself.
    # t=0    0 starts (1 GPU, ends 164). 1 (8 GPUs) waits for the whole node; 2.. held behind it.
    # t=164  0 ends; 1 starts. Arrivals at 176 and 204 see it below 500 (96, 320 GPU-s).
    # t=227  8 arrives; 1 has 63 s × 8 = 504 GPU-s: queue 1. 2 (queue 0) preempts it. Then
    #        2, 3, 4 start (ends 354, 348, 348); 5 (8 GPUs) is the blocked head; 1 is last.
    # t=354  2 ends; 5 starts; no event comes before it ends at 492 (it crosses 500 at 416.5).
    # t=492  6, 7, 8, 9 start (ends 613, 616, 647, 618); 1 (queue 1, 8 GPUs) waits.
    # t=647  8 ends: the node is free; 1 has no checkpoint: it restarts from zero, all 147 s,
    #        and ends at 794 (its 63 s × 8 GPUs of work are lost).
    choice = ProfileChoice(
        "las", "bestfit", "none", ("order",), options={"order/las": {"thresholds_gpu_s": [500]}}
    )
    run = run_replay(uniform_cluster(1, 8), jobs(10), choice)
    assert schedule(run) == {
        "0": (0, 164),
        "1": (164, 794),
        "2": (227, 354),
        "3": (227, 348),
        "4": (227, 348),
        "5": (354, 492),
        "6": (492, 613),
        "7": (492, 616),
        "8": (492, 647),
        "9": (492, 618),
    }
    one = next(r for r in run.rows if r.id == "1")
    assert (one.preemptions, one.attempts, one.run_s) == (1, 2, 63 + 147)
    assert run.metrics.preemptions == 1
    assert run.metrics.lost_gpu_hours_preemption == pytest.approx(63 * 8 / 3600)


def test_las_promotes_a_starved_job_as_tiresias_does_by_hand() -> None:
    # As in the LAS test above, with PROMOTEKNOB 2: 1 ran 63 s before its preemption at 227, so
    # it is promoted to queue 0 once it has waited 2 × 63 = 126 s, at 353. At 348 (3, 4 end) it
    # has waited 121 s: 5 stays the blocked head. At 354 (2 ends) 1 is in queue 0 and was
    # submitted before 5: it starts (from zero, 147 s: ends 501), then 5 (ends 639), then the rest.
    las = {"thresholds_gpu_s": [500], "starvation_factor": 2}
    choice = ProfileChoice("las", "bestfit", "none", ("order",), options={"order/las": las})
    run = run_replay(uniform_cluster(1, 8), jobs(10), choice)
    assert schedule(run) == {
        "0": (0, 164),
        "1": (164, 501),
        "2": (227, 354),
        "3": (227, 348),
        "4": (227, 348),
        "5": (501, 639),
        "6": (639, 760),
        "7": (639, 763),
        "8": (639, 794),
        "9": (639, 765),
    }
    one = next(r for r in run.rows if r.id == "1")
    assert (one.preemptions, one.attempts, one.run_s) == (1, 2, 63 + 147)


def test_las_preemption_resumes_from_the_last_checkpoint() -> None:
    # As above with a checkpoint every 30 s: 1 keeps 60 of its 63 s and at t=647 resumes the
    # remaining 87 s: ends 734; 3 s × 8 GPUs are lost. Nothing else moves.
    choice = ProfileChoice(
        "las", "bestfit", "none", ("order",), options={"order/las": {"thresholds_gpu_s": [500]}}
    )
    run = run_replay(uniform_cluster(1, 8), jobs(10), choice, SimConfig(checkpoint_interval_s=30))
    s = schedule(run)
    assert s["1"] == (164, 734) and s["8"] == (492, 647)
    one = next(r for r in run.rows if r.id == "1")
    assert (one.attempts, one.run_s, one.lost_work_s) == (2, 63 + 87, 3)
    assert run.metrics.lost_gpu_hours_preemption == pytest.approx(3 * 8 / 3600)


def test_a_preemptions_notice_costs_the_preemptor_its_grace() -> None:
    # As the first LAS test, every job declaring checkpoint: {signal: USR1, grace_s: 20}: at
    # t=227 job 1 gets the notice and holds the node's GPUs until 247, when 2, 3 and 4 start
    # (20 s later than without notice; everything after them moves by 20 s). 1 saved its state
    # on the signal: its 83 s (164 to 247) are kept, and at t=667 it runs the other 64 s.
    choice = ProfileChoice(
        "las", "bestfit", "none", ("order",), options={"order/las": {"thresholds_gpu_s": [500]}}
    )
    run = run_replay(uniform_cluster(1, 8), jobs(10), choice, SimConfig(preempt_grace_s=20))
    s = schedule(run)
    assert s["1"] == (164, 731)
    assert (s["2"], s["5"], s["8"]) == ((247, 374), (374, 512), (512, 667))
    one = next(r for r in run.rows if r.id == "1")
    assert (one.preemptions, one.attempts, one.run_s, one.lost_work_s) == (1, 2, 83 + 64, 0)
    assert run.metrics.lost_gpu_hours_preemption == 0


def test_las_easy_preemption_terminates_on_the_whole_trace() -> None:
    # Regression: with EASY, a preempted job used to backfill the preemptor's capacity and the
    # two preempted each other at one instant forever.
    choice = ProfileChoice(
        "las", "bestfit", "easy", ("order",), options={"order/las": {"thresholds_gpu_s": [500]}}
    )
    run = run_replay(uniform_cluster(1, 8), jobs(), choice)
    assert run.metrics.unfinished == 0 and run.metrics.preemptions > 0


def test_same_seed_same_outcome_twice() -> None:
    choice = ProfileChoice("las", "topology", "easy", ("order",))
    cfg = SimConfig(seed=7, mtbf_s=3000.0, repair_s=120.0, restart_overhead_s=10.0)
    cluster = uniform_cluster(2, 8, 2)
    work = apply_time_limits(load_trace(SIXTY, "tiresias"), TimeLimit("exact"), slack_s=10.0)
    first = run_replay(cluster, work, choice, cfg)
    second = run_replay(cluster, work, choice, cfg)
    assert first.rows == second.rows
    assert first.timeline == second.timeline
    other = run_replay(cluster, work, choice, SimConfig(seed=8, mtbf_s=3000.0, repair_s=120.0))
    assert other.rows != first.rows  # the seed does drive the failures


# ----- the CLI ------------------------------------------------------------------------------


def test_cli_replay_json_has_every_key(tmp_path: Path) -> None:
    res = CliRunner().invoke(
        app,
        ["replay", "--trace", str(SIXTY), "--format", "tiresias", "--nodes", "2", "--json"],
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert list(out) == [*SUMMARY_KEYS, "queues"]
    assert out["jobs"] == 60 and out["never_schedulable"] == 0
    assert set(out["queues"]["default"]) >= {"jobs", "avg_jct_s", "avg_slowdown", "gpu_share"}


def test_cli_compare_writes_one_set_of_outputs(tmp_path: Path) -> None:
    res = CliRunner().invoke(
        app,
        [
            "compare",
            "--trace",
            str(SIXTY),
            "--format",
            "tiresias",
            "--nodes",
            "1",
            "--profiles",
            "fifo+none,sjf+easy",
            "--out",
            str(tmp_path),
        ],
    )
    assert res.exit_code == 0, res.output
    assert "fifo+bestfit+none" in res.stdout and "sjf+bestfit+easy" in res.stdout
    names = {p.name for p in tmp_path.iterdir()}
    assert {"jct_cdf.png", "queue_length.png", "utilization.png"} <= names
    assert {"jobs-fifo_bestfit_none.csv", "timeline-sjf_bestfit_easy.csv"} <= names


@pytest.mark.parametrize(
    "args",
    [
        ["--format", "slurm"],
        ["--format", "tiresias", "--order", "random"],
        ["--format", "tiresias", "--time-limit", "soon"],
        ["--format", "philly"],  # the wrong format for this file: a refused header
        ["--format", "tiresias", "--no-such-flag"],
    ],
)
def test_cli_bad_input_is_one_line_and_exit_2(args: list[str]) -> None:
    res = CliRunner().invoke(app, ["replay", "--trace", str(SIXTY), *args])
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ")
    assert "Traceback" not in res.output
