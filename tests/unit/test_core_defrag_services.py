"""Make-before-break (issue 25, ADR 0045): a service replica that a defragmentation move takes
is not stopped at once; a replacement starts off the leaf being freed, and only once it is
ready (its readiness probe) does the old replica leave the routes and stop; the gang's Reason
says what it waits for. Through the pure Controller, as the server drives it."""

from __future__ import annotations

from dataclasses import replace

from builders import cluster_spec, profile, spec

from gpufleet.core.commands import Command, Kill, Launch, ReplicaAdded, Routes, ServiceEvent
from gpufleet.core.controller import Controller
from gpufleet.core.events import (
    Event,
    JobSubmitted,
    ReplicaProbe,
    ServiceCreated,
    TaskExited,
    TaskStarted,
)
from gpufleet.model.job import JobSpec, JobState
from gpufleet.model.reason import ReasonCode
from gpufleet.model.service import Backoff, Probe, Rollout, ServiceSpec

S = JobState


class Cluster:
    """4 nodes x 8 GPUs in 2 leaves (n00, n01 | n02, n03), defrag on; the test is the agents."""

    def __init__(self) -> None:
        self.c = Controller(
            profile(place="bestfit", preempt=["defrag"]), cluster_spec(4, 8, leaves=2)
        )
        self.now = 0.0
        self.log: list[Command] = []

    def do(self, *events: Event, at: float | None = None) -> list[Command]:
        self.now = self.now if at is None else at
        out = self.c.handle(self.now, *events)
        self.log += out
        return out

    def attempt(self, job_id: str) -> int:
        return self.c.jobs[job_id].job.attempt

    def submit(self, job_id: str, s: JobSpec) -> list[Command]:
        return self.do(JobSubmitted(job_id, s, self.now))

    def start(self, *ids: str) -> list[Command]:
        return self.do(*(TaskStarted(j, self.attempt(j), r) for j in ids for r in range(1)))

    def exit(self, job_id: str, code: int = 0) -> list[Command]:
        return self.do(TaskExited(job_id, self.attempt(job_id), 0, code))

    def node_of(self, job_id: str) -> str:
        return self.c.jobs[job_id].allocation[0].node


def pinned(job_id: str, node: str, gpus: int, **kw: object) -> JobSpec:
    return replace(spec(job_id, gpus=gpus, **kw), nodelist=(node,))  # type: ignore[arg-type]


def web() -> ServiceSpec:
    tmpl = JobSpec("web", "alice", gpus_per_worker=4, command=("serve",))
    return ServiceSpec("web", tmpl, 0, 1, None, Probe("http", "/ready"), None, Rollout(), Backoff())


def scattered() -> Cluster:
    """web.1 on n02 (leaf-1) beside b3 on n03; leaf-0 holds b0, b1, which may not be moved:
    each node has 4 GPUs taken, 4 free."""
    k = Cluster()
    for j, n in (("h0", "n00"), ("h1", "n01"), ("h3", "n03")):
        k.submit(j, pinned(j, n, 8))
    k.start("h0", "h1", "h3")
    k.do(ServiceCreated(web()), at=1.0)
    k.start("web.1")
    k.do(ReplicaProbe("web.1", 1, "readiness", True))
    assert k.node_of("web.1") == "n02"
    assert k.c.state.running["web.1"].replica  # the scheduler knows it keeps no work
    for j in ("h0", "h1", "h3"):
        k.exit(j)
    k.now = 50.0
    k.submit("b0", pinned("b0", "n00", 4, preemptible=False))
    k.submit("b1", pinned("b1", "n01", 4, preemptible=False))
    k.submit("b3", pinned("b3", "n03", 4))
    k.start("b0", "b1", "b3")
    return k


def test_a_replica_moved_for_a_gang_stops_only_once_its_replacement_is_ready() -> None:
    k = scattered()
    gang = spec("g", gpus=8, workers=2, topology="leaf", required=True)
    out = k.do(JobSubmitted("g", gang, 100.0), at=100.0)
    kills = {c.job_id for c in out if isinstance(c, Kill)}
    assert kills == {"b3"}  # the batch job stops at once; the replica serves on
    (added,) = [c for c in out if isinstance(c, ReplicaAdded)]
    assert added.job_id == "web.2" and {"n02", "n03"} <= set(added.spec.exclude)
    assert any(
        isinstance(c, ServiceEvent) and c.what == "replica moving" and "web.1 off n02" in c.why
        for c in out
    )
    assert k.c.last is not None
    assert k.c.last.reasons["g"].message == "moving 2 jobs to free 2 nodes under leaf-1"

    k.now = 101.0
    k.exit("b3", 137)  # b3 has stopped; the replacement is placed off the leaf
    r = k.c.last.reasons["g"]
    assert r.code is ReasonCode.DEFRAG
    assert r.message == (
        "moving 2 jobs to free 2 nodes under leaf-1: 1 of 2 stopped; web.1 stops once its "
        "replacement is ready"
    )
    assert k.node_of("web.2") in ("n00", "n01")

    out = k.start("web.2")
    assert not [c for c in out if isinstance(c, Kill)]  # running is not ready
    out = k.do(ReplicaProbe("web.2", 1, "readiness", True), at=105.0)
    kill = next(i for i, c in enumerate(out) if isinstance(c, Kill) and c.job_id == "web.1")
    routes = [i for i, c in enumerate(out) if isinstance(c, Routes)]
    assert routes and routes[-1] < kill  # out of the routes before it is killed
    last_routes = out[routes[-1]]
    assert isinstance(last_routes, Routes)
    assert [b.job_id for b in last_routes.backends] == ["web.2"]
    assert any(isinstance(c, ServiceEvent) and c.what == "replica moved" for c in out)

    out = k.exit("web.1", 143)
    (launch,) = [c for c in out if isinstance(c, Launch) and c.job_id == "g"]
    assert sorted(p.node for p in launch.allocation) == ["n02", "n03"]
    assert k.c.jobs["web.1"].job.state is S.CANCELLED
    assert k.c.services.services["web"].failures == 0  # a move is no failure


def test_a_replacement_that_never_gets_ready_does_not_hold_the_gang_for_ever() -> None:
    """The rollout's progress deadline bounds the wait: past it the old replica stops anyway
    (break before make, said in an event)."""
    k = scattered()
    gang = spec("g", gpus=8, workers=2, topology="leaf", required=True)
    k.do(JobSubmitted("g", gang, 100.0), at=100.0)
    k.now = 101.0
    k.exit("b3", 137)
    k.start("web.2")  # never ready
    deadline = k.c.services.services["web"].spec.rollout.progress_deadline_s
    from gpufleet.core.events import TimerFired

    out = k.do(TimerFired("service", "web"), at=100.0 + deadline)
    assert any(isinstance(c, Kill) and c.job_id == "web.1" for c in out)
    moved = [c for c in out if isinstance(c, ServiceEvent) and c.what == "replica moved"]
    assert moved and "no replacement was ready" in moved[0].why


def test_without_a_service_to_move_the_victims_are_preempted_as_before() -> None:
    k = scattered()
    k.c.services.services["web"].rollout_since = 1.0  # mid-rollout: the rollout's rules rule
    gang = spec("g", gpus=8, workers=2, topology="leaf", required=True)
    out = k.do(JobSubmitted("g", gang, 100.0), at=100.0)
    assert {(c.job_id, c.why) for c in out if isinstance(c, Kill)} == {
        ("b3", "preempted"),
        ("web.1", "preempted"),
    }
    assert not [c for c in out if isinstance(c, ReplicaAdded)]
