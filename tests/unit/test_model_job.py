"""JobSpec.from_dict (validated like the cluster spec) and the job state machine."""

from __future__ import annotations

from itertools import product
from typing import Any

import pytest

from gpufleet.model import Job, JobSpec, JobState, SpecError, Topology, TopologyLevel
from gpufleet.model.job import TERMINAL, TRANSITIONS, InvalidTransition
from gpufleet.model.resources import Resources

S = JobState
SRC = "train.yaml"


def spec(**kw: Any) -> JobSpec:
    return JobSpec.from_dict({"name": "train", "user": "ada", **kw}, source=SRC)


def refused(**kw: Any) -> SpecError:
    with pytest.raises(SpecError) as e:
        spec(**kw)
    assert e.value.source == SRC and str(e.value).startswith(SRC + ": ")
    return e.value


# ----- JobSpec -------------------------------------------------------------------------------


def test_defaults() -> None:
    s = spec()
    assert (s.queue, s.workers, s.gpus_per_worker, s.gpu_milli) == ("default", 1, 1, 1000)
    assert (s.cpu_milli, s.memory_mib) == (1000, 4096)
    assert s.topology == Topology(TopologyLevel.ANY, False)
    assert s.time_limit_s is None and s.preemptible and s.max_retries == 0


def test_every_field() -> None:
    s = spec(
        queue="vision",
        workers=4,
        gpus_per_worker=8,
        cpus=12.5,
        memory_gib=256,
        gpu_models=["h100", "A100-80GB"],
        time_limit_s=3600,
        priority=7,
        preemptible=False,
        topology={"level": "leaf", "required": True},
        dataset="imagenet",
        max_retries=3,
        command=["python", "train.py"],
        env={"SEED": 1},
    )
    assert s.gpu_models == ("H100-SXM", "A100-80GB")
    assert (s.cpu_milli, s.memory_mib, s.time_limit_s) == (12_500, 256 * 1024, 3600.0)
    assert s.topology == Topology(TopologyLevel.LEAF, True)
    assert s.topology.describe() == "under one leaf"
    assert s.worker_resources == Resources(8000, 12_500, 256 * 1024)
    assert s.total_resources == Resources(32_000, 50_000, 1024 * 1024)
    assert s.total_gpu_milli == 32_000 and s.describe() == "4 × 8 GPUs"
    assert s.command == ("python", "train.py") and s.env == (("SEED", "1"),)


def test_topology_as_a_word_is_preferred() -> None:
    s = spec(topology="pod", workers=2)
    assert s.topology == Topology(TopologyLevel.POD, False)
    assert s.topology.describe() == "under one pod (preferred)"


def test_a_fraction_of_one_gpu() -> None:
    s = spec(gpu_milli=250)
    assert s.fractional and s.total_gpu_milli == 250 and s.describe() == "0.25 GPU"


def test_a_shell_command_and_memory_in_mib() -> None:
    s = spec(command="python train.py", memory_mib=512)
    assert s.command == ("/bin/sh", "-c", "python train.py") and s.memory_mib == 512


def test_refuses_a_fraction_of_several_gpus() -> None:
    err = refused(gpu_milli=500, gpus_per_worker=2)
    assert err.field == "gpu_milli"
    assert err.reason == "a GPU share below 1000 needs gpus_per_worker: 1, got 2"


def test_refuses_an_unknown_topology_level() -> None:
    err = refused(topology="rack")
    assert err.field == "topology.level"
    assert err.reason == "must be one of node, leaf, pod, any; got 'rack'"
    err = refused(topology={"level": "row", "required": True})
    assert err.field == "topology.level"


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"gpus": 8}, "gpus"),
        ({"topology": {"level": "leaf", "strict": True}}, "topology.strict"),
    ],
)
def test_refuses_unknown_keys(kw: dict[str, Any], field: str) -> None:
    err = refused(**kw)
    assert err.field == field and err.reason.startswith("unknown key (")
    if field == "gpus":  # the key it is closest to (issue 23)
        assert err.reason == "unknown key (did you mean 'gpus_per_worker'?)"
    else:
        assert err.reason.startswith("unknown key (allowed: ")


@pytest.mark.parametrize(
    ("kw", "field", "reason"),
    [
        ({"workers": 0}, "workers", "must be at least 1, got 0"),
        ({"gpus_per_worker": -1}, "gpus_per_worker", "must be at least 0, got -1"),
        ({"gpu_milli": 0}, "gpu_milli", "must be at least 1, got 0"),
        ({"gpu_milli": 1500}, "gpu_milli", "must be at most 1000, got 1500"),
        ({"time_limit_s": -5}, "time_limit_s", "must be at least 0, got -5"),
        ({"max_retries": 101}, "max_retries", "must be at most 100, got 101"),
        ({"cpus": "many"}, "cpus", "must be a number, got 'many'"),
        ({"preemptible": "yes"}, "preemptible", "must be true or false, got 'yes'"),
    ],
)
def test_refuses_out_of_range_values(kw: dict[str, Any], field: str, reason: str) -> None:
    err = refused(**kw)
    assert (err.field, err.reason) == (field, reason)


def test_refuses_an_unknown_gpu_model_and_models_for_a_cpu_job() -> None:
    err = refused(gpu_models=["H999"])
    assert err.field == "gpu_models" and "unknown GPU model 'H999'" in err.reason
    err = refused(gpus_per_worker=0, gpu_models=["H100-SXM"])
    assert err.field == "gpu_models" and "CPU-only" in err.reason


def test_refuses_missing_name_or_user_and_names_the_path() -> None:
    with pytest.raises(SpecError) as e:
        JobSpec.from_dict({"name": "x"}, source=SRC, path="jobs[3]")
    assert (e.value.source, e.value.field, e.value.reason) == (SRC, "jobs[3].user", "is required")
    with pytest.raises(SpecError) as e:
        JobSpec.from_dict("train", source=SRC)
    assert "expected a mapping" in e.value.reason


# ----- the state machine ---------------------------------------------------------------------


ALLOWED = {
    (S.PENDING, S.STARTING),
    (S.PENDING, S.CANCELLED),
    (S.STARTING, S.RUNNING),
    (S.RUNNING, S.SUCCEEDED),
    (S.RUNNING, S.FAILED),
    (S.RUNNING, S.CANCELLED),
    (S.RUNNING, S.TIMED_OUT),
    (S.RUNNING, S.PREEMPTED),
    (S.RUNNING, S.NODE_LOST),
    (S.FAILED, S.PENDING),
    (S.PREEMPTED, S.PENDING),
    (S.NODE_LOST, S.PENDING),
}
FORBIDDEN = {
    (S.PENDING, S.RUNNING),
    (S.PENDING, S.SUCCEEDED),
    (S.SUCCEEDED, S.PENDING),
    (S.CANCELLED, S.PENDING),
    (S.TIMED_OUT, S.PENDING),
    (S.RUNNING, S.STARTING),
    (S.RUNNING, S.PENDING),  # back to the queue only through FAILED, PREEMPTED or NODE_LOST
    (S.STARTING, S.SUCCEEDED),  # every rank reports RUNNING first
}


def job_in(state: JobState) -> Job:
    j = Job("j1", JobSpec("train", "ada"), 0.0)
    j.state = state
    return j


@pytest.mark.parametrize(("a", "b"), sorted(ALLOWED))
def test_allowed_transitions(a: JobState, b: JobState) -> None:
    j = job_in(a)
    j.to(b, 5.0, "why")
    assert j.state is b and j.history[-1] == (5.0, b, "why")


@pytest.mark.parametrize(("a", "b"), sorted(FORBIDDEN))
def test_forbidden_transitions(a: JobState, b: JobState) -> None:
    j = job_in(a)
    with pytest.raises(InvalidTransition, match=f"{a.value} → {b.value} is not allowed"):
        j.to(b, 5.0)
    assert j.state is a and j.history == []


def test_the_table_agrees_with_to_for_every_pair() -> None:
    for a, b in product(JobState, JobState):
        j = job_in(a)
        if b in TRANSITIONS[a]:
            j.to(b, 0.0)
        else:
            with pytest.raises(InvalidTransition):
                j.to(b, 0.0)


def test_terminal_states_have_no_way_out() -> None:
    assert {S.SUCCEEDED, S.CANCELLED, S.TIMED_OUT} == TERMINAL
    for s in TERMINAL:
        assert TRANSITIONS[s] == frozenset() and s.terminal
    assert not S.FAILED.terminal and not S.PENDING.terminal


def test_failed_is_finished_only_when_no_retry_remains() -> None:
    j = Job("j1", JobSpec("train", "ada", max_retries=2), 0.0, state=S.FAILED)
    assert not j.finished
    j.retries_used = 2
    assert j.finished
    assert Job("j2", JobSpec("x", "y"), 0.0, state=S.FAILED).finished  # no retries at all


def test_a_life_with_numbered_attempts() -> None:
    """The attempt number is the job's; the controller bumps it at every launch (see
    test_controller.py); here the history records the whole life."""
    j = Job("j1", JobSpec("train", "ada", max_retries=1), 0.0)
    assert j.attempt == 0 and j.state is S.PENDING
    for attempt, end in ((1, S.FAILED), (2, S.SUCCEEDED)):
        j.attempt = attempt
        j.to(S.STARTING, attempt * 10.0, f"attempt {attempt}")
        j.to(S.RUNNING, attempt * 10.0 + 1)
        j.to(end, attempt * 10.0 + 5)
        if end is S.FAILED:
            j.retries_used += 1
            j.to(S.PENDING, attempt * 10.0 + 5, "retry")
    assert j.finished and j.attempt == 2
    assert [s for _, s, _ in j.history] == [
        S.STARTING,
        S.RUNNING,
        S.FAILED,
        S.PENDING,
        S.STARTING,
        S.RUNNING,
        S.SUCCEEDED,
    ]
