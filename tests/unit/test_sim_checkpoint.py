"""What a preemption or a node failure costs in the simulator: the interrupted attempt keeps only
what its last checkpoint saved (``model.checkpoint``), and the report counts the rest as lost.

The scripted scenario: one node of 8 GPUs; job ``a`` (8 GPUs, priority 0, 100 s of work) starts
at t=0. Either ``b`` (8 GPUs, priority 10, 10 s) arrives at t=35 and preempts it (priority
preemption), or the node is lost at t=35 and repaired at t=45. Either way ``a`` runs again from
t=45, with 35 s of work done in its first attempt.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from builders import cluster_spec, profile, spec
from click.testing import Result as CliResult
from typer.testing import CliRunner

from gpufleet.cli.simulate import app
from gpufleet.core.events import TaskExited
from gpufleet.model.checkpoint import check_interval, kept_work_s, lost_work_s
from gpufleet.model.errors import SpecError
from gpufleet.sim.engine import NodeFailure, SimConfig, Simulation, TraceJob
from gpufleet.sim.metrics import from_simulation
from gpufleet.sim.traces import load_trace

PREEMPT = profile(order="priority", backfill="none", preempt=("priority",))


def preempted(
    interval: float | None = None,
    *,
    trace_interval: float | None = None,
    overhead: float = 0.0,
    on_preempt: bool = False,
) -> Simulation:
    jobs = [
        TraceJob("a", spec("a", gpus=8), 0.0, 100.0, checkpoint_interval_s=interval),
        TraceJob("b", spec("b", gpus=8, priority=10), 35.0, 10.0),
    ]
    cfg = SimConfig(
        restart_overhead_s=overhead,
        checkpoint_interval_s=trace_interval,
        checkpoint_on_preempt=on_preempt,
    )
    sim = Simulation(cluster_spec(1, 8), PREEMPT, jobs, cfg)
    sim.run()
    return sim


def node_lost(
    interval: float | None,
    failures: list[NodeFailure] | None = None,
    *,
    on_preempt: bool = False,
) -> Simulation:
    jobs = [TraceJob("a", spec("a", gpus=8), 0.0, 100.0, checkpoint_interval_s=interval)]
    failures = failures or [NodeFailure(35.0, "n00", 10.0)]
    cfg = SimConfig(failures=failures, checkpoint_on_preempt=on_preempt)
    sim = Simulation(cluster_spec(1, 8), profile(backfill="none"), jobs, cfg)
    sim.run()
    return sim


# ----- the rule ------------------------------------------------------------------------------


def test_the_rule_keeps_whole_intervals_only() -> None:
    assert kept_work_s(35.0, 10.0) == 30.0
    assert kept_work_s(35.0, None) == 0.0
    assert kept_work_s(9.99, 10.0) == 0.0
    assert kept_work_s(0.3, 0.1) == pytest.approx(0.3)  # a checkpoint due at the kill counts
    assert kept_work_s(0.0, 10.0) == 0.0
    assert lost_work_s(35.0, 10.0) == 5.0
    assert lost_work_s(35.0, None) == 35.0


@pytest.mark.parametrize("bad", [0.0, -5.0, float("inf"), float("nan"), "10", True])
def test_an_interval_must_be_finite_and_positive(bad: object) -> None:
    with pytest.raises(SpecError, match="checkpoint"):
        check_interval(bad, field="checkpoint_interval_s")  # type: ignore[arg-type]
    assert check_interval(None, field="x") is None
    assert check_interval(600, field="x") == 600.0


# ----- preemption ----------------------------------------------------------------------------


def test_without_an_interval_a_preempted_job_restarts_from_zero() -> None:
    # b runs 35..45; a starts again at 45 with all 100 s to do: ends at 145 (it used to resume
    # its remaining 65 s for free and end at 110)
    sim = preempted()
    a = sim.outcomes["a"]
    assert (a.preemptions, a.attempts, a.end_time) == (1, 2, 145.0)
    assert a.lost_preempted_s == 35.0 and a.lost_failed_s == 0.0


def test_a_preempted_job_resumes_from_its_last_checkpoint() -> None:
    # every 10 s: the checkpoint at 30 s is kept, 5 s are lost; 70 s remain from t=45
    sim = preempted(10.0)
    a = sim.outcomes["a"]
    assert (a.preemptions, a.end_time) == (1, 115.0)
    assert a.lost_preempted_s == 5.0
    assert sim.outcomes["b"].end_time == 45.0


def test_the_jobs_interval_wins_over_the_traces() -> None:
    assert preempted(trace_interval=20.0).outcomes["a"].end_time == 45 + 100 - 20
    assert preempted(10.0, trace_interval=20.0).outcomes["a"].end_time == 45 + 100 - 30


def test_the_rule_keeps_everything_saved_at_the_stop() -> None:
    assert kept_work_s(35.0, None, saved_at_stop=True) == 35.0
    assert kept_work_s(35.0, 10.0, saved_at_stop=True) == 35.0
    assert lost_work_s(35.0, 10.0, saved_at_stop=True) == 0.0
    assert kept_work_s(-1.0, None, saved_at_stop=True) == 0.0


def test_a_job_that_saves_when_preempted_resumes_where_it_stopped() -> None:
    # Tiresias' preemption: a checkpoint on the stop signal; a runs 35 s, then the last 65 s
    for interval in (None, 10.0):
        a = preempted(interval, on_preempt=True).outcomes["a"]
        assert (a.preemptions, a.attempts, a.end_time) == (1, 2, 45.0 + 65.0)
        assert a.lost_preempted_s == 0.0
    a = preempted(on_preempt=True, overhead=4.0).outcomes["a"]
    assert (a.end_time, a.lost_preempted_s) == (45.0 + 4.0 + 65.0, 0.0)


def test_a_node_loss_gives_no_chance_to_save() -> None:
    # the option is about the preemption's stop signal: a lost node sends none
    a = node_lost(None, on_preempt=True).outcomes["a"]
    assert (a.lost_failed_s, a.end_time) == (35.0, 145.0)


def test_restart_overhead_still_applies_and_is_no_work() -> None:
    # the second attempt spends 4 s restarting before its 70 s of work
    a = preempted(10.0, overhead=4.0).outcomes["a"]
    assert a.end_time == 45 + 4 + 70
    assert a.lost_preempted_s == 5.0


def test_the_report_counts_the_lost_work_of_every_preemption() -> None:
    sim = preempted(10.0)
    m, rows = from_simulation(sim, wall_s=0.0)
    assert m.lost_gpu_hours_preemption == pytest.approx(8 * 5.0 / 3600)
    assert m.lost_gpu_hours_node_failure == 0.0
    assert {r.id: r.lost_work_s for r in rows} == {"a": 5.0, "b": 0.0}
    assert m.to_json()["lost_gpu_hours_preemption"] == round(8 * 5.0 / 3600, 6)


# ----- node failure --------------------------------------------------------------------------


def test_a_node_failure_costs_the_same_as_a_preemption() -> None:
    # lost at 35, back at 45: as preempted at 35 and restarted at 45
    for interval, end, lost in ((None, 145.0, 35.0), (10.0, 115.0, 5.0)):
        sim = node_lost(interval)
        a = sim.outcomes["a"]
        assert (a.attempts, a.end_time) == (2, end)
        assert (a.lost_failed_s, a.lost_preempted_s) == (lost, 0.0)
        m, _ = from_simulation(sim, wall_s=0.0)
        assert m.lost_gpu_hours_node_failure == pytest.approx(8 * lost / 3600)
        assert m.lost_gpu_hours_preemption == 0.0


def test_two_failures_each_keep_their_own_checkpoints() -> None:
    # attempt 1: 0..37, keeps 30 (loses 7); attempt 2 from 40: 40..66 = 26 s, keeps 20 (loses 6);
    # attempt 3 from 70 with 100 - 50 = 50 s to do: ends 120
    fails = [NodeFailure(37.0, "n00", 3.0), NodeFailure(66.0, "n00", 4.0)]
    a = node_lost(10.0, fails).outcomes["a"]
    assert (a.attempts, a.end_time, a.lost_failed_s) == (3, 120.0, 13.0)


def test_a_gang_that_loses_one_of_its_nodes_keeps_only_its_checkpoint() -> None:
    # 2 workers × 8 GPUs on two nodes; n00 is lost at 35: the rank on n01 is killed. Before,
    # that kill let the gang resume for free while a gang wholly on the lost node restarted
    # from its start; now both keep what the checkpoint saved.
    jobs = [TraceJob("g", spec("g", gpus=8, workers=2), 0.0, 100.0, checkpoint_interval_s=10.0)]
    cfg = SimConfig(failures=[NodeFailure(35.0, "n00", 10.0)])
    sim = Simulation(cluster_spec(2, 8), profile(backfill="none"), jobs, cfg)
    sim.run()
    g = sim.outcomes["g"]
    assert (g.attempts, g.end_time, g.lost_failed_s) == (2, 115.0, 5.0)
    m, _ = from_simulation(sim, wall_s=0.0)
    assert m.lost_gpu_hours_node_failure == pytest.approx(16 * 5.0 / 3600)


# ----- the trace and the CLI -----------------------------------------------------------------


def _trace(tmp_path: Path, a_interval: float | None = None) -> Path:
    a: dict[str, object] = {"id": "a", "submit_time": 0, "duration_s": 100, "gpus_per_worker": 8}
    if a_interval is not None:
        a["checkpoint_interval_s"] = a_interval
    b = {"id": "b", "submit_time": 35, "duration_s": 10, "gpus_per_worker": 8, "priority": 10}
    path = tmp_path / "jobs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in (a, b)), encoding="utf-8")
    return path


def _replay(trace: Path, *extra: str) -> CliResult:
    args = ["replay", "--trace", str(trace), "--format", "jobs", "--nodes", "1"]
    args += ["--order", "priority", "--preempt", "priority", "--backfill", "none"]
    return CliRunner().invoke(app, [*args, "--time-limit", "none", *extra])


def test_the_jobs_format_carries_an_interval(tmp_path: Path) -> None:
    jobs = {j.id: j for j in load_trace(_trace(tmp_path, 20.0), "jobs")}
    assert (jobs["a"].checkpoint_interval_s, jobs["b"].checkpoint_interval_s) == (20.0, None)
    csv_path = tmp_path / "jobs.csv"
    csv_path.write_text("id,submit_time,duration_s,checkpoint_interval_s\nx,0,5,60\ny,1,5,\n")
    jobs = {j.id: j for j in load_trace(csv_path, "jobs")}
    assert (jobs["x"].checkpoint_interval_s, jobs["y"].checkpoint_interval_s) == (60.0, None)


@pytest.mark.parametrize("bad", [0, -1, "soon"])
def test_the_jobs_format_refuses_a_bad_interval(tmp_path: Path, bad: object) -> None:
    path = tmp_path / "jobs.jsonl"
    row = {"id": "a", "submit_time": 0, "duration_s": 1, "checkpoint_interval_s": bad}
    path.write_text(json.dumps(row) + "\n")
    with pytest.raises(SpecError, match="line 1: checkpoint_interval_s"):
        load_trace(path, "jobs")


def test_cli_checkpoint_interval_for_the_trace_and_per_job(tmp_path: Path) -> None:
    none = json.loads(_replay(_trace(tmp_path), "--json").stdout)
    assert none["lost_gpu_hours_preemption"] == round(8 * 35 / 3600, 6)
    every10 = json.loads(_replay(_trace(tmp_path), "--checkpoint-interval", "10", "--json").stdout)
    assert every10["lost_gpu_hours_preemption"] == round(8 * 5 / 3600, 6)
    # a's own 20 s wins over the trace's 10 s: keeps 20 of 35
    own = _replay(_trace(tmp_path, 20.0), "--checkpoint-interval", "10", "--json")
    assert json.loads(own.stdout)["lost_gpu_hours_preemption"] == round(8 * 15 / 3600, 6)


def test_cli_checkpoint_on_preempt(tmp_path: Path) -> None:
    res = _replay(_trace(tmp_path), "--checkpoint-on-preempt", "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert (out["lost_gpu_hours_preemption"], out["preemptions"]) == (0, 1)
    # a: 35 s, preempted by b (10 s), then its last 65 s: ends at 110 instead of 145
    assert out["avg_jct_s"] == (110 + 10) / 2


def test_cli_says_what_preemptions_threw_away_and_how_to_model_saving(tmp_path: Path) -> None:
    lost = _replay(_trace(tmp_path), "--json")
    assert lost.exit_code == 0, lost.output
    assert "1 preemption(s) threw away 0.1 GPU-h of work" in lost.stderr  # 8 × 35 s
    assert "--checkpoint-on-preempt" in lost.stderr
    saved = _replay(_trace(tmp_path), "--checkpoint-on-preempt", "--json")
    assert "threw away" not in saved.stderr


def test_cli_node_failure_and_the_per_job_column(tmp_path: Path) -> None:
    fail = tmp_path / "fail.csv"
    fail.write_text("time,node\n35,node-000\n")
    trace = tmp_path / "one.jsonl"
    trace.write_text(json.dumps({"id": "a", "submit_time": 0, "duration_s": 100}) + "\n")
    res = _replay(trace, "--fail", str(fail), "--repair", "10", "--checkpoint-interval", "10")
    assert res.exit_code == 0, res.output
    assert "work lost: preemption / node failure" in res.stdout  # the table says it too
    out = json.loads(_replay(trace, "--fail", str(fail), "--repair", "10", "--json").stdout)
    assert out["lost_gpu_hours_node_failure"] == round(35 / 3600, 6)
    assert out["lost_gpu_hours_preemption"] == 0
    res = _replay(trace, "--fail", str(fail), "--checkpoint-interval", "10", "--out", str(tmp_path))
    assert res.exit_code == 0, res.output
    with (tmp_path / "jobs.csv").open() as fh:
        (row,) = csv.DictReader(fh)
    assert row["lost_work_s"] == "5"


def test_cli_refuses_a_bad_interval(tmp_path: Path) -> None:
    res = _replay(_trace(tmp_path), "--checkpoint-interval", "0")
    assert res.exit_code == 2
    assert "--checkpoint-interval" in res.output


@pytest.mark.parametrize("retries", [0, 1])
def test_a_crashed_rank_that_is_retried_keeps_its_checkpoint_too(retries: int) -> None:
    # a's only rank exits 1 at t=35 (a scripted crash). With a retry left it comes back after
    # the back-off and does the 70 s its checkpoint at 30 s left; without one it just ends.
    jobs = [TraceJob("a", spec("a", gpus=8, retries=retries), 0.0, 100.0, checkpoint_interval_s=10)]
    sim = Simulation(cluster_spec(1, 8), profile(backfill="none"), jobs)
    sim._push(35.0, TaskExited("a", 1, 0, 1, "crashed"))
    sim.run()
    a = sim.outcomes["a"]
    if retries:
        assert (a.state, a.attempts) == ("SUCCEEDED", 2)
        assert a.end_time == 35 + sim.controller.backoff_base_s + 70
        assert a.lost_failed_s == 5.0
    else:
        assert (a.state, a.end_time, a.lost_failed_s) == ("FAILED", 35.0, 0.0)


def test_the_simulator_reports_periodic_checkpoints_and_victims_follow_them() -> None:
    """``a`` (4 GPUs from t=0) checkpoints every 100 s; ``b`` (4 GPUs from t=150) never. At
    t=210 ``hi`` (4 GPUs, priority 10) needs one of them: ``a`` loses 10 s since its checkpoint
    at 200, ``b`` 60 s since its start, so ``a`` goes (by the time since the start it was
    ``b``), and ``a`` loses only those 10 s."""
    jobs = [
        TraceJob("a", spec("a", gpus=4), 0.0, 1000.0, checkpoint_interval_s=100.0),
        TraceJob("b", spec("b", gpus=4), 150.0, 1000.0),
        TraceJob("hi", spec("hi", gpus=4, priority=10), 210.0, 10.0),
    ]
    sim = Simulation(cluster_spec(1, 8), PREEMPT, jobs, SimConfig())
    sim.run()
    assert (sim.outcomes["a"].preemptions, sim.outcomes["b"].preemptions) == (1, 0)
    assert sim.outcomes["a"].lost_preempted_s == pytest.approx(10.0)
