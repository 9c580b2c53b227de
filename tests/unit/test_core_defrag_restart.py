"""A restarted controller keeps its defragmentation moves in progress (issue 25, ADR 0045).

The move is stored (``DefragMoved``, each leaf's last); a new core given it back
(``Controller.restore(defrag_moves=...)``) holds the freed leaf for the gang (nominated), keeps
the victim stopping as a preemption (its exit after the restart requeues it, not a failure),
sends its Kill again with its checkpoint notice, and keeps the move's time (the "how often"
bounds) and its Reason. Through the pure Controller, as the server drives it; the live restart
is tests/e2e/test_defrag_live.py."""

from __future__ import annotations

from dataclasses import replace

from builders import cluster_spec, profile, spec

from gpufleet.core.commands import Command, DefragMoved, Kill, Launch
from gpufleet.core.controller import Controller, RestoredJob
from gpufleet.core.events import Event, JobSubmitted, TaskExited, TaskStarted
from gpufleet.model.job import JobSpec, JobState
from gpufleet.model.limits import SIGNALS
from gpufleet.model.notice import CheckpointNotice, StopNotice
from gpufleet.model.reason import ReasonCode
from gpufleet.scheduler.snapshot import DefragMove

S = JobState
USR1 = SIGNALS["USR1"]


def pinned(job_id: str, node: str, gpus: int, **kw: object) -> JobSpec:
    return replace(spec(job_id, gpus=gpus, **kw), nodelist=(node,))  # type: ignore[arg-type]


def new_core() -> Controller:
    """4 nodes x 8 GPUs in 2 leaves (n00, n01 | n02, n03), defrag on."""
    return Controller(profile(place="bestfit", preempt=["defrag"]), cluster_spec(4, 8, leaves=2))


def do(c: Controller, now: float, *events: Event) -> list[Command]:
    return c.handle(now, *events)


def moved_for_the_gang() -> tuple[Controller, list[Command]]:
    """b0, b1 (not preemptible) on leaf-0, b2 and b3 on leaf-1, each on half a node; b3 asks
    for a 60 s checkpoint notice. A 2 x 8 gang under one leaf at 100 frees leaf-1."""
    c = new_core()
    jobs = [
        pinned("b0", "n00", 4, preemptible=False),
        pinned("b1", "n01", 4, preemptible=False),
        pinned("b2", "n02", 4),
        replace(pinned("b3", "n03", 4), checkpoint=CheckpointNotice(USR1, 60)),
    ]
    do(c, 0.0, *(JobSubmitted(j.name, j, 0.0) for j in jobs))
    do(c, 1.0, *(TaskStarted(j.name, 1, 0) for j in jobs))
    gang = spec("g", gpus=8, workers=2, topology="leaf", required=True)
    out = do(c, 100.0, JobSubmitted("g", gang, 100.0))
    return c, out


def restarted(old: Controller, moves: list[DefragMove]) -> Controller:
    """A new core from what the store holds: the nodes, the unfinished jobs, the moves."""
    c = new_core()
    jobs = [
        RestoredJob(r.job, r.seq, r.allocation, r.borrowing)
        for r in old.jobs.values()
        if not r.job.finished
    ]
    c.restore([n.spec for n in old.nodes.values()], jobs, defrag_moves=moves)
    return c


def test_a_move_is_stored_with_its_victims_attempts() -> None:
    _, out = moved_for_the_gang()
    (moved,) = [x.move for x in out if isinstance(x, DefragMoved)]
    assert (moved.leaf, moved.for_job, moved.time) == ("leaf-1", "g", 100.0)
    assert sorted(zip(moved.victims, moved.attempts, strict=True)) == [("b2", 1), ("b3", 1)]
    assert moved.message == "moving 2 jobs to free 2 nodes under leaf-1"


def test_a_restarted_controller_keeps_its_move_in_progress() -> None:
    c, out = moved_for_the_gang()
    (moved,) = [x.move for x in out if isinstance(x, DefragMoved)]
    do(c, 101.0, TaskExited("b2", 1, 0, 143, "preempted"))  # b2 stopped; b3 in its notice
    assert c.jobs["b3"].job.state is S.RUNNING

    c2 = restarted(c, [moved])  # the controller restarts while b3 writes its checkpoint
    assert c2.state.defrag_moves["leaf-1"] == moved  # the "how often" bounds count it
    assert c2.jobs["g"].nominated  # the freed leaf is held for the gang
    out = c2.tick(105.0)
    kills = [k for k in out if isinstance(k, Kill)]
    assert kills == [Kill("b3", 1, (0,), "preempted", StopNotice(USR1, 60.0))]
    assert not [x for x in out if isinstance(x, Launch) and x.job_id == "g"]
    r = c2.last.reasons["g"] if c2.last is not None else None
    assert r is not None and r.code is ReasonCode.DEFRAG
    assert r.message.startswith("moving 2 jobs to free 2 nodes under leaf-1: 1 of 2 stopped")

    # b3's checkpoint is written and it exits: a preemption, requeued, not a failure
    out = do(c2, 130.0, TaskExited("b3", 1, 0, 143, "preempted; killed by SIGTERM"))
    b3 = c2.jobs["b3"].job
    assert [st for _, st, _ in b3.history][-2:] == [S.PREEMPTED, S.PENDING]
    assert b3.history[-2][2] == (
        "for job g: moving 2 jobs to free 2 nodes under leaf-1 (SIGUSR1, then up to 60 s for its "
        "checkpoint)"
    )
    assert b3.retries_used == 0
    (launch,) = [x for x in out if isinstance(x, Launch) and x.job_id == "g"]
    assert sorted(p.node for p in launch.allocation) == ["n02", "n03"]


def test_without_the_moves_the_victim_exit_would_read_as_a_failure() -> None:
    """What the stored moves prevent (the restart of before): b3's exit fails it."""
    c, _ = moved_for_the_gang()
    do(c, 101.0, TaskExited("b2", 1, 0, 143, "preempted"))
    c2 = restarted(c, [])
    assert not c2.jobs["g"].nominated
    do(c2, 130.0, TaskExited("b3", 1, 0, 143, "preempted; killed by SIGTERM"))
    assert c2.jobs["b3"].job.state is S.FAILED


def test_a_move_whose_victims_have_moved_on_stops_nothing() -> None:
    """A victim restarted since (a later attempt) is not stopped again; a gang that started
    is not nominated."""
    c, out = moved_for_the_gang()
    (moved,) = [x.move for x in out if isinstance(x, DefragMoved)]
    old = replace(moved, attempts=tuple(a - 1 for a in moved.attempts))  # other attempts
    c2 = restarted(c, [old])
    assert not [k for k in c2.tick(105.0) if isinstance(k, Kill)]
    assert c2.jobs["b3"].ending is None
