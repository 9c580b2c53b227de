"""A job of several queues (Slurm's -p a,b) through the pure core: it runs in the queue the
scheduler started it in (its record's queue, usage, the launch's partition), and after a
requeue it may start in any of its queues again."""

from __future__ import annotations

from dataclasses import replace

from builders import cluster_spec, profile, queue, spec

from gpufleet.core.commands import Launch
from gpufleet.core.controller import Controller
from gpufleet.core.events import JobSubmitted, NodeLost, TaskExited, TaskStarted
from gpufleet.model.job import JobState
from gpufleet.model.resources import Resources

S = JobState
GPUS8 = Resources(8000, 1000, 4096)


def test_it_runs_and_is_charged_in_the_queue_it_started_in_and_may_move_after_a_requeue() -> None:
    c = Controller(profile(), cluster_spec(3, 8, queues=[queue("a", 8), queue("b", 8)]))
    c.handle(0.0, JobSubmitted("x", spec("x", gpus=8, queue="a"), 0.0))
    j = replace(spec("j", gpus=8, queue="a"), queues=("a", "b"))
    out = c.handle(1.0, JobSubmitted("j", j, 1.0))
    assert [o.job_id for o in out if isinstance(o, Launch)] == ["j"]
    rec = c.jobs["j"]
    assert rec.job.state is S.STARTING
    assert rec.job.spec.queue == "b" and rec.job.spec.partitions == ("b", "a")
    assert rec.job.spec.queues == ("a", "b")  # the list as given stays
    assert c.queue_used("b") == GPUS8 and c.queue_used("a") == GPUS8
    assert c.launch_facts("j").queue == "b"  # SLURM_JOB_PARTITION
    node = rec.allocation[0].node
    c.handle(2.0, TaskStarted("j", 1, 0), TaskStarted("x", 1, 0))
    # x ends (a is free again), then j's node is lost: requeued, it starts in a this time
    c.handle(3.0, TaskExited("x", 1, 0, 0))
    assert c.queue_used("a") == Resources()
    out = c.handle(4.0, NodeLost(node))
    assert rec.job.attempt == 2 and rec.job.state is S.STARTING
    assert rec.job.spec.queue == "a" and rec.job.spec.partitions == ("a", "b")
    assert c.queue_used("a") == GPUS8 and c.queue_used("b") == Resources()
