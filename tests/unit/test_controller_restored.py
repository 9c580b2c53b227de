"""A controller whose store was restored from a backup (issue 26): what a registering agent
remembers having run tells it which attempts the backup missed. Pure core, no clock."""

from __future__ import annotations

from builders import cluster_spec, profile, spec

from gpufleet.core.commands import Launch
from gpufleet.core.controller import Controller
from gpufleet.core.events import JobSubmitted, NodeRegistered, TaskExited, TaskStarted
from gpufleet.model.job import JobState

S = JobState


def launches(out: list[object]) -> list[Launch]:
    return [c for c in out if isinstance(c, Launch)]


def busy_node() -> tuple[Controller, str]:
    """One 8-GPU node running ``big`` (attempt 1); ``j`` pending behind it."""
    c = Controller(profile(), cluster_spec(1, 8))
    (la,) = launches(c.handle(0.0, JobSubmitted("big", spec("big", gpus=8), 0.0)))
    node = la.allocation[0].node
    c.handle(1.0, TaskStarted("big", 1, 0, node))
    assert not launches(c.handle(2.0, JobSubmitted("j", spec("j", gpus=8), 2.0)))
    return c, node


def test_an_attempt_the_node_ran_after_the_backup_is_not_numbered_again() -> None:
    c, node = busy_node()
    n = c.nodes[node].spec
    # the node ran j's attempt 1 in the lost store's time (it ended), and runs big still
    c.handle(3.0, NodeRegistered(n, (("big", 1, 0),), ended=(("j", 1, 0),)))
    assert c.jobs["j"].job.state is S.PENDING and c.jobs["j"].job.attempt == 1
    assert c.jobs["big"].job.attempt == 1  # adopted, as it was
    (la,) = launches(c.handle(4.0, TaskExited("big", 1, 0, 0, "")))
    assert (la.job_id, la.attempt) == ("j", 2)  # not 1: the node would drop it as a redelivery


def test_what_a_node_ran_of_the_current_attempts_changes_nothing() -> None:
    c, node = busy_node()
    n = c.nodes[node].spec
    c.handle(3.0, NodeRegistered(n, (("big", 1, 0),), ended=(("j", 0, 0), ("gone", 4, 0))))
    assert c.jobs["j"].job.attempt == 0
    (la,) = launches(c.handle(4.0, TaskExited("big", 1, 0, 0, "")))
    assert (la.job_id, la.attempt) == ("j", 1)
