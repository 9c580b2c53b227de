"""Checkpoint before preempt (issue 25), the pure parts: the spec's ``checkpoint`` and
``min_runtime_s`` (and Slurm's --signal standing in), the notice a preemption's Kill carries
under its queue's cap, victims chosen by the work since their last checkpoint, and the
minimum runtime that keeps a job from being a victim."""

from __future__ import annotations

from dataclasses import replace

import pytest
from builders import cluster, cluster_spec, cycle, job, profile, running, spec

from gpufleet.core.commands import Kill, Launch
from gpufleet.core.controller import Controller, RestoredJob
from gpufleet.core.events import (
    JobSubmitted,
    NodeRegistered,
    NodeUp,
    QueueChanged,
    TaskCheckpointed,
    TaskExited,
    TaskStarted,
)
from gpufleet.io.sbatch import parse_sbatch_text
from gpufleet.model.errors import SpecError
from gpufleet.model.job import JobSpec, WarningSignal
from gpufleet.model.notice import CheckpointNotice, StopNotice, stop_notice
from gpufleet.model.queue import QueueSpec

USR1, USR2, TERM = 10, 12, 15


def read(**kw: object) -> JobSpec:
    return JobSpec.from_dict({"name": "j", "user": "u", **kw})


def test_the_checkpoint_declaration_in_either_form() -> None:
    assert read(checkpoint={"signal": "USR1", "grace_s": 120}).checkpoint == CheckpointNotice(
        USR1, 120
    )
    assert read(checkpoint="B:SIGUSR2@30").checkpoint == CheckpointNotice(USR2, 30, True)
    assert read(checkpoint="USR1").checkpoint == CheckpointNotice(USR1, 60)  # Slurm's 60 s
    assert read(min_runtime_s=600).min_runtime_s == 600.0
    s = read()
    assert s.checkpoint is None and s.min_runtime_s == 0.0 and s.preempt_notice is None


def test_bad_declarations_are_refused_naming_the_field_all_at_once() -> None:
    with pytest.raises(SpecError) as e:
        read(checkpoint={"signal": "NOPE", "grace_s": -1, "extra": 1}, min_runtime_s=-5)
    text = str(e.value)
    assert "checkpoint.grace_s" in text and "checkpoint.extra" in text
    assert "checkpoint.signal" in text and "NOPE" in text
    assert "min_runtime_s" in text
    with pytest.raises(SpecError, match=r"checkpoint\.grace_s"):
        read(checkpoint={"signal": "USR1", "grace_s": 70000})
    with pytest.raises(SpecError, match=r"checkpoint.*R:"):
        read(checkpoint="R:USR1@10")
    with pytest.raises(SpecError, match="checkpoint: needs its signal"):
        read(checkpoint={"grace_s": 10})


def test_the_warning_signal_stands_in_as_slurms_send_user_signal() -> None:
    s = read(signal="B:USR1@120")
    assert s.signal == WarningSignal(USR1, 120, True)
    assert s.preempt_notice == CheckpointNotice(USR1, 120, True)
    both = read(signal="USR2@90", checkpoint={"signal": "USR1", "grace_s": 30})
    assert both.preempt_notice == CheckpointNotice(USR1, 30)  # the declaration wins


@pytest.mark.parametrize(
    ("line", "notice"),
    [
        ("--signal=B:USR1@120", CheckpointNotice(USR1, 120, True)),
        ("--signal=USR1@120", CheckpointNotice(USR1, 120, False)),
        ("--signal=12", CheckpointNotice(USR2, 60, False)),  # sig_time: 60 when not given
    ],
)
def test_sbatch_signal_is_the_preemptions_notice(line: str, notice: CheckpointNotice) -> None:
    script = f"#!/bin/bash\n#SBATCH {line}\n#SBATCH --time=10\nsrun train\n"
    got = parse_sbatch_text(script, source="job.sh")
    s = JobSpec.from_dict({"user": "u", **got.spec})
    assert s.preempt_notice == notice


def test_the_queue_caps_the_grace() -> None:
    n = CheckpointNotice(USR1, 120, True)
    assert stop_notice(n, 300) == StopNotice(USR1, 120.0, True)
    assert stop_notice(n, 45) == StopNotice(USR1, 45.0, True)
    assert stop_notice(None, 300) is None
    q = QueueSpec.from_dict({"name": "q", "preempt_grace_max_s": 30}, source="t", path="")
    assert q.preempt_grace_max_s == 30.0
    assert QueueSpec.from_dict({"name": "q"}, source="t", path="").preempt_grace_max_s == 300


# ----- the scheduler: victims by the work since their last checkpoint -----------------------

NOW = 1000.0


def victims(res) -> list[str]:  # type: ignore[no-untyped-def]
    return [p.job_id for p in res.preemptions]


def test_a_fresh_checkpoint_makes_the_older_job_the_cheaper_victim() -> None:
    old = running("old", ("n00", range(4)), start=0.0)  # 1000 s of 4 GPUs since its start
    young = running("young", ("n00", range(4, 8)), start=600.0)  # 400 s
    res = cycle(cluster(1, 8), [job("hi", gpus=4, priority=5)], [old, young], now=NOW,
                preempt=["priority"])  # fmt: skip
    assert victims(res) == ["young"]
    # old saved its state 100 s ago: preempting it now loses 100 s, young's still 400 s
    saved = replace(old, checkpoint_time=900.0)
    res = cycle(cluster(1, 8), [job("hi", gpus=4, priority=5)], [saved, young], now=NOW,
                preempt=["priority"])  # fmt: skip
    assert victims(res) == ["old"]
    assert saved.lost_work(NOW) == 100 * 4 and saved.attained(NOW) == 1000 * 4


def test_a_checkpoint_from_before_the_attempt_saves_nothing_of_it() -> None:
    r = replace(running("r", ("n00", range(2)), start=500.0), checkpoint_time=100.0)
    assert r.saved_since == 500.0 and r.lost_work(NOW) == 500 * 2


def test_no_victim_inside_its_minimum_runtime() -> None:
    kept = running("kept", ("n00", range(8)), start=900.0, priority=0)
    kept = replace(kept, spec=replace(kept.spec, min_runtime_s=300.0))  # 100 s of its 300
    res = cycle(cluster(1, 8), [job("hi", gpus=8, priority=5)], [kept], now=NOW,
                preempt=["priority"])  # fmt: skip
    assert victims(res) == []
    res = cycle(cluster(1, 8), [job("hi", gpus=8, priority=5)], [kept], now=1200.0,
                preempt=["priority"])  # fmt: skip
    assert victims(res) == ["kept"]  # 300 s run: fair game


# ----- the controller: the Kill of a preemption carries the notice ---------------------------


def preempted(notice_spec: JobSpec, cap: float | None = None) -> tuple[Controller, list[Kill]]:
    c = Controller(profile(preempt=["priority"]), cluster_spec(1, 8))
    if cap is not None:
        c.handle(0.0, QueueChanged(QueueSpec("default", preempt_grace_max_s=cap)))
    c.handle(0.0, JobSubmitted("low", notice_spec, 0.0))
    c.handle(1.0, TaskStarted("low", 1, 0))
    out = c.handle(5.0, JobSubmitted("hi", replace(spec("hi", gpus=8), priority=5), 5.0))
    return c, [k for k in out if isinstance(k, Kill)]


def test_a_preemption_gives_the_jobs_notice_capped_by_its_queue() -> None:
    low = replace(spec("low", gpus=8), checkpoint=CheckpointNotice(USR1, 120, True))
    _, (k,) = preempted(low)
    assert (k.why, k.notice) == ("preempted", StopNotice(USR1, 120.0, True))
    _, (k,) = preempted(low, cap=30.0)
    assert k.notice == StopNotice(USR1, 30.0, True)
    _, (k,) = preempted(spec("low", gpus=8))
    assert k.notice is None  # no declaration: SIGTERM at once, as before


def test_a_rank_done_with_its_notice_ends_the_others_wait() -> None:
    low = replace(spec("low", gpus=4, workers=2), checkpoint=CheckpointNotice(USR1, 120))
    c = Controller(profile(preempt=["priority"]), cluster_spec(1, 8))
    c.handle(0.0, JobSubmitted("low", low, 0.0))
    c.handle(1.0, TaskStarted("low", 1, 0), TaskStarted("low", 1, 1))
    out = c.handle(5.0, JobSubmitted("hi", replace(spec("hi", gpus=8), priority=5), 5.0))
    (k,) = [x for x in out if isinstance(x, Kill)]
    assert k.ranks == (0, 1) and k.notice is not None
    out = c.handle(9.0, TaskExited("low", 1, 0, 0))  # rank 0 wrote the checkpoint and left
    assert [(x.ranks, x.notice) for x in out if isinstance(x, Kill)] == [((1,), None)]


def test_the_checkpoint_report_moves_the_jobs_lost_work() -> None:
    c = Controller(profile(), cluster_spec(1, 8))
    c.handle(0.0, JobSubmitted("j", spec("j", gpus=2), 0.0))
    c.handle(10.0, TaskStarted("j", 1, 0))
    c.handle(100.0, TaskCheckpointed("j", 1, 0, age_s=20.0))
    view = c.state.running["j"]
    assert view.checkpoint_time == 80.0 and view.lost_work(100.0) == 20 * 2
    c.handle(110.0, TaskCheckpointed("j", 1, 0, age_s=500.0))  # before the start: no news
    c.handle(120.0, TaskCheckpointed("j", 0, 0, age_s=0.0))  # another attempt's: ignored
    assert c.state.running["j"].checkpoint_time == 80.0


# ----- a drain with a deadline stops what still runs there, with the notice ------------------


def test_a_drains_deadline_stops_the_nodes_jobs_with_their_notice() -> None:
    from gpufleet.core.commands import SetTimer
    from gpufleet.core.events import NodeDrain, TimerFired
    from gpufleet.core.nodes import DRAIN_TIMER

    c = Controller(profile(), cluster_spec(2, 8))
    noticed = replace(spec("a", gpus=8), checkpoint=CheckpointNotice(USR1, 60))
    c.handle(0.0, JobSubmitted("a", noticed, 0.0), JobSubmitted("b", spec("b", gpus=8), 0.0))
    c.handle(1.0, TaskStarted("a", 1, 0), TaskStarted("b", 1, 0))
    node = c.jobs["a"].allocation[0].node
    out = c.handle(10.0, NodeDrain(node, True, "kernel update", deadline_s=300.0))
    assert SetTimer(310.0, DRAIN_TIMER, node) in out
    assert not [k for k in out if isinstance(k, Kill)]  # it runs on until then
    out = c.handle(310.0, TimerFired(DRAIN_TIMER, node))
    (k,) = [k for k in out if isinstance(k, Kill)]
    assert (k.job_id, k.why, k.notice) == ("a", "drained", StopNotice(USR1, 60.0))
    out = c.handle(320.0, TaskExited("a", 1, 0, 0))
    assert c.jobs["a"].job.state.value in ("PENDING", "STARTING")  # requeued, not charged
    assert c.jobs["a"].job.retries_used == 0 and c.jobs["b"].job.state.value == "RUNNING"


def test_a_resume_before_the_deadline_keeps_the_jobs() -> None:
    from gpufleet.core.events import NodeDrain, TimerFired
    from gpufleet.core.nodes import DRAIN_TIMER

    c = Controller(profile(), cluster_spec(1, 8))
    c.handle(0.0, JobSubmitted("a", spec("a", gpus=8), 0.0))
    c.handle(1.0, TaskStarted("a", 1, 0))
    c.handle(10.0, NodeDrain("n00", True, "maybe", deadline_s=60.0))
    c.handle(20.0, NodeDrain("n00", False, "not now"))
    out = c.handle(70.0, TimerFired(DRAIN_TIMER, "n00"))
    assert not [k for k in out if isinstance(k, Kill)]
    c.handle(80.0, NodeDrain("n00", True, "later", deadline_s=100.0))
    out = c.handle(70.0 + 60.0, TimerFired(DRAIN_TIMER, "n00"))  # the first drain's timer
    assert not [k for k in out if isinstance(k, Kill)]  # the new deadline is 180


def test_a_maintenances_requeue_gives_the_notice_too() -> None:
    """Rolling maintenance past its drain deadline stops a node's jobs (NodeDrain's requeue):
    as a preemption does, each with its notice."""
    from gpufleet.core.events import NodeDrain

    c = Controller(profile(), cluster_spec(1, 8))
    noticed = replace(spec("a", gpus=8), checkpoint=CheckpointNotice(USR1, 60, True))
    c.handle(0.0, JobSubmitted("a", noticed, 0.0))
    c.handle(1.0, TaskStarted("a", 1, 0))
    out = c.handle(5.0, NodeDrain("n00", True, "maintenance m1", requeue=True))
    (k,) = [k for k in out if isinstance(k, Kill)]
    assert (k.why, k.notice) == ("preempted", StopNotice(USR1, 60.0, True))


def test_a_stopping_victims_room_is_not_taken_twice() -> None:
    """A victim in its notice's wait still holds its GPUs: the preemptor, nominated, waits for
    them. A pass meanwhile must not preempt another job for it (before: one that a checkpoint
    report had just made cheaper than the stopping victim was stopped too)."""
    stopping = replace(running("b", ("n00", range(4)), start=500.0), stopping_since=990.0)
    saved = replace(running("a", ("n00", range(4, 8)), start=0.0), checkpoint_time=995.0)
    res = cycle(cluster(1, 8), [job("hi", gpus=4, priority=5)], [stopping, saved], now=NOW,
                preempt=["priority"])  # fmt: skip
    assert victims(res) == [] and res.starts == []
    # a job the stopping victim's room does not hold still preempts, the stopping one aside
    res = cycle(cluster(1, 8), [job("hi", gpus=8, priority=5)], [stopping, saved], now=NOW,
                preempt=["priority"])  # fmt: skip
    assert victims(res) == ["a"]


def test_a_checkpoint_during_a_victims_notice_stops_no_second_job() -> None:
    """Through the core: b is preempted for hi with a notice; while b waits for its checkpoint,
    a's report makes a the cheaper job, and a later pass (a node's change) runs: a runs on."""
    c = Controller(profile(order="priority", preempt=["priority"]), cluster_spec(1, 2))
    notice = CheckpointNotice(USR1, 120)
    for t, name in ((0.0, "a"), (2.0, "b")):
        c.handle(
            t, JobSubmitted(name, replace(spec(name, gpus=1, priority=-1), checkpoint=notice), t)
        )
        c.handle(t + 1, TaskStarted(name, 1, 0))
    out = c.handle(10.0, JobSubmitted("hi", spec("hi", gpus=1, priority=0), 10.0))
    assert [k.job_id for k in out if isinstance(k, Kill)] == ["b"]
    c.handle(10.1, TaskCheckpointed("a", 1, 0, 0.05))
    node = next(iter(c.nodes.values())).spec
    out = c.handle(20.0, NodeUp(node, healthy=True))
    assert [k.job_id for k in out if isinstance(k, Kill)] == []
    out = c.handle(30.0, TaskExited("b", 1, 0, 0))
    assert [x.job_id for x in out if isinstance(x, Launch)] == ["hi"]


def test_a_restarted_controller_keeps_a_stop_its_agent_says_is_under_way() -> None:
    """The controller restarted while b saved for hi: the agent's registration says b is being
    stopped for an eviction, so the new core stops it as a preemption again (requeued, not
    charged) and its GPUs are hi's room: a, made cheaper by a checkpoint, runs on."""
    old = Controller(profile(order="priority", preempt=["priority"]), cluster_spec(1, 2))
    notice = CheckpointNotice(USR1, 120)
    for t, name in ((0.0, "a"), (2.0, "b")):
        job_spec = replace(spec(name, gpus=1, priority=-1), checkpoint=notice)
        old.handle(t, JobSubmitted(name, job_spec, t))
        old.handle(t + 1, TaskStarted(name, 1, 0))
    c = Controller(profile(order="priority", preempt=["priority"]), cluster_spec(1, 2))
    recs = [RestoredJob(r.job, r.seq, r.allocation, r.borrowing) for r in old.jobs.values()]
    node = next(iter(old.nodes.values())).spec
    c.restore([node], recs)
    c.hold_restored_node(node.name, "the controller restarted")
    c.handle(10.0, JobSubmitted("hi", spec("hi", gpus=1, priority=0), 10.0))
    running = (("a", 1, 0), ("b", 1, 0))
    # a's checkpoint, reported with the registration, makes a the cheaper job
    registered = NodeRegistered(node, running, stopping=(("b", 1, 0),))
    out = c.handle(11.0, registered, TaskCheckpointed("a", 1, 0, 5.0))
    assert [k.job_id for k in out if isinstance(k, Kill)] == ["b"]  # again, with its notice
    assert c.jobs["b"].stopping_since == 11.0
    out = c.handle(11.5, NodeUp(node, healthy=True))
    assert [k.job_id for k in out if isinstance(k, Kill)] == []
    out = c.handle(30.0, TaskExited("b", 1, 0, 0))
    assert [x.job_id for x in out if isinstance(x, Launch)] == ["hi"]
    assert c.jobs["b"].job.retries_used == 0
