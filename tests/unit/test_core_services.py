"""Services in the pure core (core/services/), through the Controller as the server drives it:
replicas kept alive, replaced with back-off (and away from a failing node), routed only when
ready, scaled, rolled (and rolled back) and deleted; the autoscaler; a restart."""

from __future__ import annotations

import itertools
from dataclasses import replace

from builders import cluster_spec, profile
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gpufleet.core.commands import (
    Command,
    Kill,
    Launch,
    ReplicaAdded,
    RouteBackend,
    Routes,
    ServiceEvent,
    ServiceRecord,
    SetTimer,
)
from gpufleet.core.controller import Controller
from gpufleet.core.events import (
    Event,
    ReplicaProbe,
    ServiceCreated,
    ServiceDeleted,
    ServiceLoad,
    ServiceScaled,
    ServiceUpdated,
    TaskExited,
    TaskStarted,
    TimerFired,
)
from gpufleet.core.services import REPLICA_PORT_BASE, RestoredService, desired_replicas
from gpufleet.model.job import JobSpec, JobState
from gpufleet.model.service import Autoscale, Backoff, Probe, Rollout, ServiceSpec

S = JobState
HTTP = Probe("http", "/ready")


def service(
    replicas: int = 2,
    *,
    readiness: Probe | None = HTTP,
    liveness: Probe | None = None,
    command: str = "serve",
    autoscale: Autoscale | None = None,
    rollout: Rollout | None = None,
    restart: Backoff | None = None,
    port: int = 0,
) -> ServiceSpec:
    tmpl = JobSpec("web", "alice", gpus_per_worker=1, command=(command,))
    return ServiceSpec(
        "web",
        tmpl,
        port,
        replicas,
        autoscale,
        readiness,
        liveness,
        rollout or Rollout(),
        restart or Backoff(),
    )


class Svc:
    """A controller with a service on ``nodes`` × 8-GPU nodes; the test is the agents, the
    probe runners and the timer heap (``until`` fires the service's timers due)."""

    def __init__(self, spec: ServiceSpec, *, nodes: int = 2, gpus: int = 8) -> None:
        self.c = Controller(profile(), cluster_spec(nodes, gpus))
        self.now = 0.0
        self.timers: list[float] = []
        self.log: list[Command] = []
        self.out = self.do(ServiceCreated(spec))

    def do(self, *events: Event, at: float | None = None) -> list[Command]:
        if at is not None:
            self.now = at
        out = self.c.handle(self.now, *events)
        self.timers += [c.at for c in out if isinstance(c, SetTimer) and c.kind == "service"]
        self.log += out
        return out

    def until(self, t: float) -> list[Command]:
        """Fire every service timer due by ``t`` (in time order), then stand at ``t``."""
        out: list[Command] = []
        while True:
            due = sorted(x for x in self.timers if x <= t)
            if not due:
                break
            self.timers.remove(due[0])
            out += self.do(TimerFired("service", "web"), at=max(self.now, due[0]))
        self.now = max(self.now, t)
        return out

    @property
    def svc(self):  # type: ignore[no-untyped-def]
        return self.c.services.services["web"]

    def replicas(self) -> list[str]:
        """The live replicas (not being stopped), oldest first."""
        rs = sorted(self.svc.replicas.values(), key=lambda r: r.index)
        return [r.job_id for r in rs if r.live]

    def attempt(self, job_id: str) -> int:
        return self.c.jobs[job_id].job.attempt

    def state(self, job_id: str) -> JobState:
        return self.c.jobs[job_id].job.state

    def start(self, *job_ids: str) -> list[Command]:
        ids = job_ids or tuple(j for j in self.replicas() if self.state(j) is S.STARTING)
        return self.do(*(TaskStarted(j, self.attempt(j), 0) for j in ids))

    def ready(self, *job_ids: str, ok: bool = True) -> list[Command]:
        ids = job_ids or tuple(j for j in self.replicas() if self.state(j) is S.RUNNING)
        return self.do(*(ReplicaProbe(j, self.attempt(j), "readiness", ok) for j in ids))

    def up(self) -> list[Command]:
        """Every starting replica starts and becomes ready."""
        return self.start() + self.ready()

    def exit(self, job_id: str, code: int = 1, why: str = "") -> list[Command]:
        return self.do(TaskExited(job_id, self.attempt(job_id), 0, code, why))

    def routed(self) -> tuple[RouteBackend, ...]:
        return [c for c in self.log if isinstance(c, Routes)][-1].backends

    def node(self, job_id: str) -> str:
        return self.c.jobs[job_id].allocation[0].node


def added(out: list[Command]) -> list[ReplicaAdded]:
    return [c for c in out if isinstance(c, ReplicaAdded)]


def routes(out: list[Command]) -> list[Routes]:
    return [c for c in out if isinstance(c, Routes)]


def kills(out: list[Command]) -> list[Kill]:
    return [c for c in out if isinstance(c, Kill)]


def events(out: list[Command], what: str) -> list[ServiceEvent]:
    return [c for c in out if isinstance(c, ServiceEvent) and c.what == what]


# ----- alive and routed ----------------------------------------------------------------------


def test_a_service_creates_its_replicas_as_jobs_and_routes_only_ready_ones() -> None:
    s = Svc(service(3))
    adds = added(s.out)
    assert [a.job_id for a in adds] == ["web.1", "web.2", "web.3"]
    assert all(a.spec.workers == 1 and a.spec.time_limit_s is None for a in adds)
    assert all(a.spec.max_retries == 0 and a.generation == 1 for a in adds)
    assert len([c for c in s.out if isinstance(c, Launch)]) == 3  # scheduled as any job
    assert routes(s.out) == [Routes("web", ())]
    out = s.start()
    assert routes(out) == []  # running, but the readiness probe has not passed
    out = s.ready("web.2")
    (r,) = routes(out)
    assert [b.job_id for b in r.backends] == ["web.2"]
    assert r.backends[0].port >= REPLICA_PORT_BASE and r.backends[0].node == s.node("web.2")
    out = s.ready("web.1", "web.3")
    assert [b.job_id for b in routes(out)[-1].backends] == ["web.1", "web.2", "web.3"]
    # replicas listen on distinct ports, on one node and across nodes (nodes may share a host)
    assert len({b.port for b in s.routed()}) == 3
    out = s.ready("web.1", ok=False)  # readiness lost: out of the routes, not killed
    assert [b.job_id for b in routes(out)[-1].backends] == ["web.2", "web.3"]
    assert kills(out) == []
    assert s.ready("web.2") == [] or routes(s.ready("web.2")) == []  # no change: no Routes


def test_replicas_on_different_nodes_get_different_ports_while_ports_are_free() -> None:
    # one replica per node (each takes all 8 GPUs): the lowest port free in the whole cluster,
    # so that two nodes on one host (a local cluster) never give two replicas one port
    spec = service(2, readiness=None)
    s = Svc(replace(spec, replica=replace(spec.replica, gpus_per_worker=8)), nodes=2)
    s.start()
    (a, b) = s.routed()
    assert a.node != b.node and a.port != b.port


def test_without_a_readiness_probe_a_running_replica_is_ready() -> None:
    s = Svc(service(2, readiness=None))
    out = s.start()
    assert [b.job_id for b in routes(out)[-1].backends] == ["web.1", "web.2"]


def test_a_fixed_port_is_every_replicas_port() -> None:
    s = Svc(service(1, readiness=None, port=8000))
    s.start()
    assert [b.port for b in s.routed()] == [8000]
    assert s.c.services.replica_port("web.1") == 8000


def test_a_probe_about_another_attempt_or_a_stale_one_changes_nothing() -> None:
    s = Svc(service(1))
    s.start()
    out = s.do(ReplicaProbe("web.1", 7, "readiness", True))
    assert routes(out) == []
    out = s.do(ReplicaProbe("nojob", 1, "readiness", True))
    assert routes(out) == []


# ----- failures: back-off, liveness, a bad node ----------------------------------------------


def test_an_exit_is_replaced_after_a_back_off_that_doubles_caps_and_resets() -> None:
    s = Svc(service(1, readiness=None, restart=Backoff(10, 60, reset_s=600)))
    s.start()
    for delay in (10, 20, 40, 60, 60):  # doubling, capped at max_s
        (j,) = s.replicas()
        t0 = s.now
        out = s.exit(j, 1)
        assert routes(out)[-1].backends == ()
        assert s.replicas() == [] and added(out) == []
        assert added(s.until(t0 + delay - 0.5)) == []
        (a,) = added(s.until(t0 + delay))
        s.start(a.job_id)
        s.now += 1  # it runs a second, then fails again
    # a replica that stays ready reset_s and then fails starts the count again
    (j,) = s.replicas()
    s.now += 600
    t0 = s.now
    s.exit(j, 0)  # an exit 0 is a failure too: a service's replica must keep running
    assert added(s.until(t0 + 9.5)) == []
    assert len(added(s.until(t0 + 10))) == 1


def test_a_replica_that_died_before_it_was_ready_leaves_its_port_to_others_for_a_while() -> None:
    # something else on the node holds the port (another cluster, a stray server): the
    # replica exits at once; its successor gets another port instead of the same again
    s = Svc(service(1), nodes=1)
    s.start()
    first = s.c.services.replica_port("web.1")

    def replaced(job: str, died: float, ready: bool = False) -> tuple[str, list[Command]]:
        """``job`` exits at ``died`` (ready first if so); its successor, once its back-off
        (10 or 20 s here) has passed."""
        if ready:
            s.ready(job)
        s.do(at=died)
        out = s.exit(job, 1, "Address already in use")
        (new,) = added(s.until(died + 100))
        s.start(new.job_id)
        return new.job_id, out

    a, out = replaced("web.1", 100.0)
    assert "a new replica in 10 s or later" in events(out, "replica failed")[0].why
    assert s.c.services.replica_port(a) == first + 1
    # a replica that was ready and then died does not mark its port
    b, _ = replaced(a, 200.0, ready=True)
    assert s.c.services.replica_port(b) == first + 1
    # past the hint's life (600 s) the lowest port is taken again
    c, _ = replaced(b, 950.0, ready=True)
    assert s.c.services.replica_port(c) == first


def test_readiness_changes_are_in_the_services_history_once_each() -> None:
    s = Svc(service(1), nodes=1)
    s.start()
    where = f"web.1 on {s.node('web.1')}:{s.c.services.replica_port('web.1')}"
    assert [e.why for e in events(s.ready("web.1"), "replica ready")] == [where]
    assert events(s.ready("web.1"), "replica ready") == []  # no change, no event
    out = s.do(ReplicaProbe("web.1", 1, "readiness", False, "HTTP 503"))
    assert [e.why for e in events(out, "replica not ready")] == [
        f"{where}: HTTP 503; out of the routes"
    ]
    assert events(s.do(ReplicaProbe("web.1", 1, "readiness", False)), "replica not ready") == []


def test_the_replacement_waits_exactly_the_back_off() -> None:
    s = Svc(service(1, readiness=None))
    s.start()
    s.do(at=100.0)
    out = s.exit("web.1", 3)
    assert [t for t in s.timers if t > 100] == [110.0]
    assert added(s.until(109.9)) == []
    out = s.until(110.0)
    assert [a.job_id for a in added(out)] == ["web.2"]
    assert s.state("web.2") is S.STARTING  # scheduled in the same step


def test_a_liveness_failure_kills_the_replica_out_of_the_routes_first_then_replaces_it() -> None:
    s = Svc(service(2, readiness=None, liveness=Probe("tcp")))
    s.start()
    out = s.do(ReplicaProbe("web.1", 1, "liveness", False, "connection refused"))
    r, k = routes(out), kills(out)
    assert [b.job_id for b in r[0].backends] == ["web.2"]
    assert k == [Kill("web.1", 1, (0,), "cancelled")]
    assert out.index(r[0]) < out.index(k[0])  # the gateway drains it before it is killed
    out = s.exit("web.1", 143, "killed")
    assert "liveness: connection refused" in events(out, "replica failed")[0].why
    out = s.until(s.now + 10)
    assert [a.job_id for a in added(out)] == ["web.3"]


def test_repeated_failures_on_one_node_send_the_replacement_elsewhere() -> None:
    s = Svc(service(1, readiness=None, restart=Backoff(1, 1, avoid_node_after=2)))
    s.start()
    assert s.node("web.1") == "n00"
    s.exit("web.1")
    out = s.until(s.now + 1)
    (a,) = added(out)
    assert a.spec.exclude == ()
    s.start()
    assert s.node(a.job_id) == "n00"
    s.exit(a.job_id)
    (b,) = added(s.until(s.now + 1))
    assert b.spec.exclude == ("n00",)
    assert s.node(b.job_id) == "n01"


def test_a_failing_node_the_replica_alone_may_use_is_not_avoided() -> None:
    # avoidance is a preference: a replica whose own -x leaves it n00 alone goes back there,
    # paced by the back-off, instead of waiting for ever as NeverSchedulable
    spec = service(1, readiness=None, restart=Backoff(1, 1, avoid_node_after=2))
    s = Svc(replace(spec, replica=replace(spec.replica, exclude=("n01",))))
    s.start()
    for _ in range(3):
        (job,) = s.replicas()
        assert s.node(job) == "n00"
        s.exit(job)
        (a,) = added(s.until(s.now + 1))
        assert a.spec.exclude == ("n01",)
        s.start()
    assert s.svc.node_failures == {"n00": 3}
    assert s.state(a.job_id) is S.RUNNING and s.node(a.job_id) == "n00"


def test_a_lost_node_requeues_the_replica_without_counting_a_failure() -> None:
    from gpufleet.core.events import NodeLost

    s = Svc(service(1, readiness=None), nodes=2)
    s.start()
    node = s.node("web.1")
    out = s.do(NodeLost(node))
    assert routes(out)[-1].backends == ()
    assert events(out, "replica failed") == []
    assert s.replicas() == ["web.1"]  # the same replica, its job requeued and placed again
    assert s.state("web.1") is S.STARTING and s.node("web.1") != node


# ----- scaling -------------------------------------------------------------------------------


def test_scale_down_stops_not_ready_replicas_first_then_the_newest() -> None:
    s = Svc(service(4))
    s.start()
    s.ready("web.1", "web.3", "web.4")
    out = s.do(ServiceScaled("web", 2))
    assert sorted(k.job_id for k in kills(out)) == ["web.2", "web.4"]
    assert [b.job_id for b in s.routed()] == ["web.1", "web.3"]
    r = routes(out)[0]
    assert out.index(r) < out.index(kills(out)[0])
    out = s.do(ServiceScaled("web", 3))
    assert [a.job_id for a in added(out)] == ["web.5"]


def test_scaling_to_zero_and_back() -> None:
    s = Svc(service(2, readiness=None))
    s.start()
    s.do(ServiceScaled("web", 0))
    assert s.replicas() == [] and s.routed() == ()
    out = s.do(ServiceScaled("web", 1))
    assert len(added(out)) == 1


# ----- rolling update ------------------------------------------------------------------------


def test_a_rolling_update_adds_new_ready_replicas_before_stopping_old_ones() -> None:
    ro = Rollout(max_surge=_n(1), max_unavailable=_n(0))
    s = Svc(service(4, rollout=ro))
    s.up()
    s.do(ServiceUpdated(service(4, command="serve-v2", rollout=ro)), at=10.0)
    seen_total, seen_ready = [], []
    for _ in range(20):
        live = s.replicas()
        gens = {j: s.svc.replicas[j].generation for j in live}
        seen_total.append(len(live))
        seen_ready.append(len(s.routed()))
        if all(g == 2 for g in gens.values()) and len(live) == 4 and len(s.routed()) == 4:
            break
        s.now += 1
        s.up()
    assert max(seen_total) == 5  # at most one above the desired count
    assert min(seen_ready) == 4  # never fewer ready than desired (max_unavailable 0)
    assert all(s.svc.replicas[j].generation == 2 for j in s.replicas())
    assert events(s.log, "rolled out")
    assert s.svc.previous is None
    for j, r in list(s.svc.replicas.items()):
        if r.stopping:
            s.exit(j, 143)
    assert set(s.svc.specs) == {2}  # no replica of generation 1 left: its spec is dropped


def test_a_rollout_with_unavailable_stops_old_ones_first() -> None:
    ro = Rollout(max_surge=_n(0), max_unavailable=_n(2))
    s = Svc(service(4, rollout=ro))
    s.up()
    out = s.do(ServiceUpdated(service(4, command="v2", rollout=ro)), at=10.0)
    assert len(kills(out)) == 2 and len(added(out)) == 2
    assert len(s.routed()) == 2


def test_a_rollout_whose_new_replicas_keep_failing_rolls_back_by_itself() -> None:
    ro = Rollout(max_surge=_n(1), max_unavailable=_n(0), max_failures=2)
    s = Svc(service(2, rollout=ro))
    s.up()
    before = [b.job_id for b in s.routed()]
    s.do(ServiceUpdated(service(2, command="broken", rollout=ro)), at=10.0)
    for _ in range(2):
        (new,) = [j for j in s.replicas() if s.svc.replicas[j].generation == 2]
        s.start(new)
        s.exit(new, 1)
        s.until(s.now + 300)
    assert events(s.log, "rolled back")
    assert s.svc.generation == 1 and s.svc.spec.replica.command == ("serve",)
    assert [b.job_id for b in s.routed()] == before  # the old replicas never stopped
    assert all(s.svc.replicas[j].generation == 1 for j in s.replicas())
    assert len(s.replicas()) == 2


def test_a_rollout_without_progress_rolls_back_at_the_deadline() -> None:
    ro = Rollout(max_surge=_n(1), max_unavailable=_n(0), progress_deadline_s=600)
    s = Svc(service(2, rollout=ro))
    s.up()
    s.do(ServiceUpdated(service(2, command="slow", rollout=ro)), at=10.0)
    s.start()  # starts, never ready
    assert not events(s.until(609), "rolled back")
    out = s.until(610)
    assert events(out, "rolled back")[0].why.startswith("generation 2 rolled back to 1")
    assert any(k.job_id == "web.3" for k in kills(out))
    assert len(s.routed()) == 2


def test_an_update_during_a_rollout_rolls_over_and_keeps_the_last_good_generation() -> None:
    ro = Rollout(max_surge=_n(1), max_unavailable=_n(0), max_failures=1)
    s = Svc(service(2, rollout=ro))
    s.up()
    s.do(ServiceUpdated(service(2, command="v2", rollout=ro)), at=10.0)
    (v2,) = [j for j in s.replicas() if s.svc.replicas[j].generation == 2]
    s.do(ServiceUpdated(service(2, command="v3", rollout=ro)), at=11.0)
    assert v2 not in s.replicas()  # a not-ready replica of a superseded generation goes
    assert s.svc.generation == 3 and s.svc.previous == 1
    (v3,) = [j for j in s.replicas() if s.svc.replicas[j].generation == 3]
    s.start(v3)
    s.exit(v3)  # v3 fails too: back to generation 1, the last that rolled out
    assert s.svc.generation == 1 and events(s.log, "rolled back")
    assert {s.svc.replicas[j].generation for j in s.replicas()} == {1}


def test_a_settings_only_update_rolls_nothing() -> None:
    s = Svc(service(2))
    s.up()
    out = s.do(ServiceUpdated(service(3)))
    assert [a.generation for a in added(out)] == [1]
    assert kills(out) == [] and s.svc.generation == 1


# ----- delete, restart -----------------------------------------------------------------------


def test_delete_stops_every_replica_and_then_the_service_is_gone() -> None:
    s = Svc(service(3))
    s.start()
    s.ready("web.1")
    out = s.do(ServiceDeleted("web"))
    assert routes(out) == [Routes("web", ())]
    assert sorted(k.job_id for k in kills(out)) == ["web.1", "web.2", "web.3"]
    for j in ("web.1", "web.2"):
        s.exit(j, 143)
    out = s.exit("web.3", 143)
    assert events(out, "removed")
    assert [c for c in out if isinstance(c, ServiceRecord)] == [ServiceRecord("web", None)]
    assert "web" not in s.c.services.services
    assert all(s.state(j) is S.CANCELLED for j in ("web.1", "web.2", "web.3"))


def test_a_restart_rebuilds_the_service_from_its_record() -> None:
    from gpufleet.core.jobmaster import RestoredJob

    s = Svc(service(2, rollout=Rollout(max_surge=_n(1), max_unavailable=_n(0))))
    s.up()
    s.do(ServiceUpdated(service(2, command="v2")), at=5.0)  # a rollout under way
    recs = [c for c in s.log if isinstance(c, ServiceRecord)]
    record = recs[-1].record
    assert isinstance(record, RestoredService) and record.previous == 1
    c2 = Controller(profile(), cluster_spec(2, 8))
    jobs = [
        RestoredJob(r.job, r.seq, r.allocation) for r in s.c.jobs.values() if not r.job.finished
    ]
    c2.restore([n.spec for n in s.c.nodes.values()], jobs, services=[record])
    svc = c2.services.services["web"]
    assert svc.generation == 2 and svc.previous == 1
    assert c2.state.running["web.1"].replica  # defrag counts no lost work for it
    assert {j: r.generation for j, r in svc.replicas.items()} == {
        "web.1": 1,
        "web.2": 1,
        "web.3": 2,
    }
    out = c2.tick(6.0)
    assert [b.job_id for b in routes(out)[0].backends] == ["web.1", "web.2"]


def test_a_restart_kills_again_the_replicas_that_were_being_stopped() -> None:
    from gpufleet.core.jobmaster import RestoredJob

    s = Svc(service(2, readiness=None))
    s.start()
    s.do(ServiceScaled("web", 1))  # web.2 is being stopped; its Kill is lost with the process
    record = [c for c in s.log if isinstance(c, ServiceRecord)][-1].record
    assert record is not None
    c2 = Controller(profile(), cluster_spec(2, 8))
    jobs = [RestoredJob(r.job, r.seq, r.allocation) for r in s.c.jobs.values()]
    c2.restore([n.spec for n in s.c.nodes.values()], jobs, services=[record])
    out = c2.tick(5.0)
    assert kills(out) == [Kill("web.2", 1, (0,), "cancelled")]
    assert [b.job_id for b in routes(out)[0].backends] == ["web.1"]


# ----- the autoscaler ------------------------------------------------------------------------

AUTO = Autoscale(0, 5, 10.0, upscale_delay_s=30, downscale_delay_s=120)


def test_the_autoscaler_waits_its_delays_and_scales_from_zero_at_once() -> None:
    a = AUTO
    assert desired_replicas([(0, 0.0)], 0, a, 0) == 0
    assert desired_replicas([(0, 0.0), (10, 3.0)], 0, a, 10) == 1  # from zero at once
    hist = [(0.0, 10.0), (10.0, 45.0)]
    assert desired_replicas(hist, 1, a, 20) == 1  # asked for 5 only for 10 s
    assert desired_replicas([*hist, (40.0, 45.0)], 1, a, 40) == 5  # held 30 s
    hist = [(0.0, 45.0), (100.0, 5.0)]
    assert desired_replicas(hist, 5, a, 200) == 5  # 100 s of low load: not yet
    assert desired_replicas(hist, 5, a, 220) == 1
    assert desired_replicas([(0.0, 1000.0)], 9, a, 0) == 5  # clamped at once


def test_the_autoscaler_through_the_controller() -> None:
    auto = Autoscale(1, 4, 10.0, upscale_delay_s=30, downscale_delay_s=60)
    s = Svc(service(1, readiness=None, autoscale=auto))
    s.up()
    assert len(s.replicas()) == 1
    s.do(ServiceLoad("web", 35.0, 0.0), at=0.0)
    assert len(s.replicas()) == 1
    out = s.do(ServiceLoad("web", 35.0, 30.0), at=30.0)
    assert len(added(out)) == 3 and events(out, "scaled")
    s.start()
    s.do(ServiceLoad("web", 5.0, 40.0), at=40.0)
    assert len(s.replicas()) == 4
    out = s.do(ServiceLoad("web", 5.0, 100.0), at=100.0)
    assert len(kills(out)) == 3 and s.replicas() == ["web.1"]


@settings(max_examples=200, deadline=None)
@given(
    lo=st.integers(0, 3),
    span=st.integers(0, 6),
    up=st.sampled_from([0.0, 10.0, 30.0]),
    down=st.sampled_from([0.0, 20.0, 60.0]),
    steps=st.lists(
        st.tuples(st.floats(0.5, 20.0), st.floats(0.0, 200.0, allow_nan=False)),
        min_size=1,
        max_size=60,
    ),
)
@example(lo=0, span=1, up=10.0, down=20.0, steps=[(1.0, 0.0), (1.0, 1e-10), (19.0, 0.0)])
def test_the_autoscaler_stays_within_min_max_and_never_flaps_inside_its_delays(
    lo: int, span: int, up: float, down: float, steps: list[tuple[float, float]]
) -> None:
    a = Autoscale(lo, max(1, lo + span), 10.0, upscale_delay_s=up, downscale_delay_s=down)
    n, t = lo, 0.0
    hist: list[tuple[float, float]] = []
    changes: list[tuple[float, int, int]] = []  # (time, from, to)
    for dt, qps in steps:
        t += dt
        hist.append((t, qps))
        m = desired_replicas(hist, n, a, t)
        assert a.min <= m <= a.max
        if m != n:
            changes.append((t, n, m))
        n = m
    for (t1, f1, to1), (t2, f2, to2) in itertools.pairwise(changes):
        if to1 > f1 and to2 < f2:
            assert t2 - t1 >= down  # a scale-up holds at least the downscale delay
        if to1 < f1 and to2 > f2 and f2 != 0:
            assert t2 - t1 >= up  # a scale-down holds the upscale delay (but from zero)


def _n(v: int):  # type: ignore[no-untyped-def]
    from gpufleet.model.service import Amount

    return Amount(v)


def test_replace_keeps_the_dataclass_frozen() -> None:
    spec = service(1)
    assert replace(spec, replicas=2).replicas == 2


# ----- the simulator drives the same core ----------------------------------------------------


def test_a_simulated_service_keeps_its_replicas() -> None:
    from gpufleet.sim.engine import Simulation

    sim = Simulation(cluster_spec(2, 8), profile(), [])
    sim.at(0.0, ServiceCreated(service(2, readiness=None)))
    sim.at(50.0, TaskExited("web.1", 1, 0, 1, "crashed"))  # a replica crashes
    sim.run(until=1000.0)
    assert sorted(b.job_id for b in sim.routes["web"]) == ["web.2", "web.3"]  # replaced
    svc = sim.controller.services.services["web"]
    assert sorted(svc.replicas) == ["web.2", "web.3"]
    assert sim.controller.jobs["web.3"].job.history[0][0] == 60.0  # after the 10 s back-off
    sim.at(1000.0, ServiceDeleted("web"))
    sim.run()
    assert sim.routes["web"] == () and not sim.controller.services.services


def test_events_the_state_contradicts_are_refused_alone() -> None:
    auto = Autoscale(1, 3, 10.0)
    s = Svc(service(1, autoscale=auto))
    out, refused = s.c.apply_events(
        1.0,
        [
            ServiceCreated(service(1)),  # exists already
            ServiceScaled("web", 5),  # outside 1-3
            ServiceLoad("web", float("nan"), 1.0),
            ServiceScaled("nope", 1),
            ReplicaProbe("web.1", 1, "startup", True),
            ServiceScaled("web", 2),  # fine
        ],
    )
    assert len(refused) == 5
    assert "exists already" in str(refused[0][1]) and "outside its 1-3" in str(refused[1][1])
    assert len(added(out)) == 1 and s.c.services.services["web"].desired == 2
