"""A failed node as the live controller sees it (``SimConfig.node_grace_s``, ``sim.silence``):
silent from its failure, declared lost by the driver's liveness timers a grace later, its jobs
holding their GPUs and doing no work in between; repaired sooner, it comes back without them.

The scripted scenario: two nodes of 8 GPUs (n00, n01); job ``a`` (8 GPUs) starts at t=0 on n00,
which fails at t=35; the grace is 10 s.
"""

from __future__ import annotations

import json
from pathlib import Path

from builders import cluster_spec, profile, spec
from typer.testing import CliRunner

from gpufleet.cli.simulate import app
from gpufleet.core.commands import Launch, Transition
from gpufleet.core.driver import Step
from gpufleet.model.job import JobState
from gpufleet.sim.engine import NodeFailure, SimConfig, Simulation, TraceJob

GRACE = 10.0


class History:
    """A journal that keeps what each step did (the driver's hook the live store fills)."""

    def __init__(self) -> None:
        self.transitions: list[Transition] = []
        self.launches: list[Launch] = []

    def commit(self, step: Step) -> None:
        self.transitions += step.transitions
        self.launches += [c for c in step.commands if isinstance(c, Launch)]

    def of(self, job: str, state: JobState) -> list[float]:
        return [t.time for t in self.transitions if t.job_id == job and t.new is state]


def failed(
    jobs: list[TraceJob], grace: float | None, *, repair: float = 1000.0
) -> tuple[Simulation, History]:
    cfg = SimConfig(failures=[NodeFailure(35.0, "n00", repair)], node_grace_s=grace)
    sim = Simulation(cluster_spec(2, 8), profile(backfill="none"), jobs, cfg)
    sim.driver.journal = history = History()
    sim.run()
    first = next(c for c in history.launches if c.job_id == "a")
    assert first.allocation[0].node == "n00"  # the scenario's premise
    return sim, history


def a(duration: float = 100.0, gpus: int = 8) -> TraceJob:
    return TraceJob("a", spec("a", gpus=gpus), 0.0, duration)


def test_a_failed_nodes_jobs_are_requeued_a_grace_after_the_failure() -> None:
    sim, history = failed([a()], GRACE)
    assert history.of("a", JobState.NODE_LOST) == [35.0 + GRACE]
    assert [c.attempt for c in history.launches] == [1, 2]
    assert history.of("a", JobState.STARTING) == [0.0, 35.0 + GRACE]
    why = next(t.why for t in history.transitions if t.new is JobState.NODE_LOST)
    assert "no heartbeat for 10 s (grace 10 s)" in why
    assert sim.outcomes["a"].end_time == 35.0 + GRACE + 100.0
    # without a grace the loss is known at the failure itself, as before
    _, at_once = failed([a()], None)
    assert at_once.of("a", JobState.NODE_LOST) == [35.0]


def test_a_job_on_the_failed_node_does_not_finish_after_the_failure() -> None:
    # its 40 s of work would be done at t=40, inside the grace: the dead node reports no exit
    sim, history = failed([a(40.0)], GRACE)
    assert history.of("a", JobState.SUCCEEDED) == [35.0 + GRACE + 40.0]
    assert history.of("a", JobState.NODE_LOST) == [35.0 + GRACE]
    out = sim.outcomes["a"]
    assert out.attempts == 2
    assert out.lost_failed_s == 35.0  # the work done up to the failure, not up to the loss


def test_busy_gpu_seconds_include_the_detection_delay() -> None:
    late, _ = failed([a()], GRACE)
    at_once, _ = failed([a()], None)
    assert at_once.gpu_seconds == 8 * (35.0 + 100.0)
    assert late.gpu_seconds == at_once.gpu_seconds + 8 * GRACE
    assert late.outcomes["a"].run_s == 35.0 + GRACE + 100.0  # held, though doing nothing
    held = [gpus for t, _, _, gpus in late.timeline if 35.0 <= t < 35.0 + GRACE]
    assert held and set(held) == {8}


def test_a_node_repaired_within_its_grace_comes_back_without_its_jobs() -> None:
    sim, history = failed([a()], GRACE, repair=4.0)
    (lost,) = [t for t in history.transitions if t.new is JobState.NODE_LOST]
    assert lost.time == 35.0 + 4.0
    assert "rebooted 4 s after it died, within its grace" in lost.why
    assert history.of("a", JobState.STARTING) == [0.0, 39.0]
    # the timers no longer watch it: no second loss a grace after the failure
    assert sim.driver.liveness is not None and sim.driver.liveness.due() is None
    assert not sim.controller.nodes["n00"].lost
    assert sim.outcomes["a"].lost_failed_s == 35.0


def test_a_job_placed_on_the_silent_node_never_starts_and_loses_no_work() -> None:
    # a holds 4 GPUs of n00; b (4 GPUs) comes at t=38 and is placed beside it (best fit)
    b = TraceJob("b", spec("b", gpus=4), 38.0, 50.0)
    sim, history = failed([a(gpus=4), b], GRACE)
    (launch_b, *_) = [c for c in history.launches if c.job_id == "b"]
    assert launch_b.allocation[0].node == "n00"
    assert history.of("b", JobState.STARTING) == [38.0, 35.0 + GRACE]
    assert history.of("b", JobState.RUNNING) == [35.0 + GRACE]  # its second attempt only
    assert history.of("b", JobState.NODE_LOST) == [35.0 + GRACE]
    assert sim.outcomes["b"].lost_failed_s == 0.0


# ----- no grace: the simulator as it was -------------------------------------------------------


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


# (first start, end, attempts, lost to failures) per job and the busy GPU-seconds of the replay
# below, as the simulator gave them before it could run the liveness timers
BEFORE = (
    [
        (0.0, 60.0, 1, 0.0),
        (20.0, 117.0, 1, 0.0),
        (40.0, 174.0, 1, 0.0),
        (60.0, 907.707, 2, 0.0),
        (80.0, 288.0, 1, 0.0),
        (100.0, 160.0, 1, 0.0),
        (120.0, 217.0, 1, 0.0),
        (140.0, 274.0, 1, 0.0),
        (160.0, 422.0, 2, 12.575),
        (180.0, 388.0, 1, 0.0),
        (217.0, 277.0, 1, 0.0),
        (274.0, 371.0, 1, 0.0),
        (240.0, 475.0, 2, 22.575),
        (260.0, 463.575, 2, 24.005),
        (280.0, 500.575, 2, 4.005),
        (524.005, 584.005, 1, 0.0),
        (371.0, 468.0, 1, 0.0),
        (371.0, 544.575, 2, 14.707),
        (475.0, 688.0, 2, 0.707),
        (584.005, 792.005, 1, 0.0),
        (400.0, 460.0, 1, 0.0),
        (420.0, 517.0, 1, 0.0),
        (544.575, 678.575, 1, 0.0),
        (595.707, 766.707, 1, 0.0),
    ],
    14244.836,
)


def test_without_a_grace_a_replay_with_failures_is_what_it_was() -> None:
    jobs = [
        TraceJob(
            f"j{i:02}",
            spec(f"j{i:02}", gpus=(1, 2, 4, 8)[i % 4], workers=2 if i % 7 == 3 else 1),
            20.0 * i,
            60.0 + 37.0 * (i % 5),
        )
        for i in range(24)
    ]
    failures = [NodeFailure(90.0, "n01", 50.0), NodeFailure(300.0, "n00", 400.0)]
    cfg = SimConfig(
        failures=failures, mtbf_s=300.0, repair_s=120.0, seed=5, checkpoint_interval_s=30.0
    )
    sim = Simulation(cluster_spec(3, 8), profile(), jobs, cfg)
    sim.run()
    rows = [
        (_r(o.first_start), _r(o.end_time), o.attempts, _r(o.lost_failed_s))
        for o in sim.outcomes.values()
    ]
    assert (rows, _r(sim.gpu_seconds)) == BEFORE
    # the same replay with a grace differs: the timers do run
    cfg.node_grace_s = 60.0
    late = Simulation(cluster_spec(3, 8), profile(), jobs, cfg)
    late.run()
    assert late.gpu_seconds != sim.gpu_seconds


# ----- the CLI -------------------------------------------------------------------------------


def _replay(tmp_path: Path, *extra: str) -> dict[str, object]:
    fail = tmp_path / "fail.csv"
    fail.write_text("time,node\n35,node-000\n")
    trace = tmp_path / "one.jsonl"
    trace.write_text(json.dumps({"id": "a", "submit_time": 0, "duration_s": 100}) + "\n")
    args = ["replay", "--trace", str(trace), "--format", "jobs", "--nodes", "2", "--json"]
    args += ["--time-limit", "none", "--fail", str(fail), "--repair", "1000", *extra]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    out: dict[str, object] = json.loads(res.stdout)
    return out


def test_cli_node_grace_delays_the_loss(tmp_path: Path) -> None:
    at_once = _replay(tmp_path)
    late = _replay(tmp_path, "--node-grace-s", "10")
    assert (at_once["avg_jct_s"], late["avg_jct_s"]) == (135.0, 145.0)
    # the work lost stops at the failure: the same 35 s either way
    assert late["lost_gpu_hours_node_failure"] == at_once["lost_gpu_hours_node_failure"]


def test_cli_refuses_a_grace_that_is_not_positive(tmp_path: Path) -> None:
    for bad in ("0", "-1", "inf"):
        args = ["replay", "--trace", "x.csv", "--format", "jobs", "--node-grace-s", bad]
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 2 and "--node-grace-s" in res.output, bad


def test_a_simulated_job_whose_dependency_can_never_be_met_is_cancelled_and_the_run_ends() -> None:
    """A trace has no user to cancel it (the live controller keeps it pending, ADR 0072)."""
    jobs = [
        TraceJob("a", spec("a", gpus=1, limit=10.0), 0.0, 100.0),  # runs out of its time
        TraceJob("b", spec("b", gpus=1), 0.0, 5.0, (("afterok", "a"),)),
    ]
    sim = Simulation(cluster_spec(1, 8), profile(), jobs)
    sim.run()
    assert sim.outcomes["a"].state == JobState.TIMED_OUT.value
    assert sim.outcomes["b"].state == JobState.CANCELLED.value
