"""The agent's pure state machine: commands → actions, stale attempts, lease and fencing."""

from __future__ import annotations

from gpufleet.agent.probes.book import ReplicaProbe
from gpufleet.agent.state import (
    AgentState,
    Kill,
    Launch,
    Register,
    Send,
    Signal,
    StartProbes,
    StopProbes,
)
from gpufleet.agent.tasks import EXIT_REFUSED, RunnerEvent
from gpufleet.api.schemas import AgentCommand, HeartbeatResult, TaskRef
from gpufleet.model.service import Probe


def launch(job: str = "j1", attempt: int = 0, rank: int = 0, **kw: object) -> AgentCommand:
    return AgentCommand.model_validate(
        {"kind": "launch", "job": job, "attempt": attempt, "rank": rank, "command": ["true"], **kw}
    )


def kill(job: str = "j1", attempt: int = 0, rank: int = 0, **kw: object) -> AgentCommand:
    return AgentCommand.model_validate(
        {"kind": "kill", "job": job, "attempt": attempt, "rank": rank, **kw}
    )


def registered(lease_s: float = 10.0, t: float = 0.0) -> AgentState:
    st = AgentState(fence_grace_s=1.5)
    assert st.on_registered(lease_s, t) == []
    return st


def started(st: AgentState, job: str = "j1", attempt: int = 0, rank: int = 0) -> None:
    st.on_task(RunnerEvent("started", (job, attempt, rank)))


# ----- commands ------------------------------------------------------------------------------


def test_launch_becomes_a_launch_action_and_a_running_task() -> None:
    st = registered()
    cmd = launch(rank=1)
    assert st.on_command(cmd, 1.0) == [Launch(cmd)]
    assert st.running() == [TaskRef(job="j1", attempt=0, rank=1)]
    [send] = st.on_task(RunnerEvent("started", ("j1", 0, 1)))
    assert isinstance(send, Send) and send.event.kind == "started"
    assert st.tasks[("j1", 0, 1)] == "running"


def test_a_redelivered_launch_runs_once_even_after_it_exited() -> None:
    st = registered()
    assert len(st.on_command(launch(), 1.0)) == 1
    assert st.on_command(launch(), 1.1) == []
    st.on_task(RunnerEvent("exited", ("j1", 0, 0), 0))
    assert st.on_command(launch(), 2.0) == []
    assert st.running() == []


def test_a_stale_attempt_is_refused_and_reported() -> None:
    st = registered()
    st.on_command(launch(attempt=3), 1.0)
    [send] = st.on_command(launch(attempt=2, rank=1), 1.1)
    assert isinstance(send, Send)
    ev = send.event
    assert (ev.kind, ev.attempt, ev.rank, ev.exit_code) == ("exited", 2, 1, EXIT_REFUSED)
    assert "stale attempt 2" in ev.why and "3" in ev.why
    assert st.running() == [TaskRef(job="j1", attempt=3, rank=0)]


def test_a_newer_attempt_supersedes_the_older_ranks_of_that_job_only() -> None:
    st = registered()
    st.on_command(launch("j1", 0, 0), 1.0)
    st.on_command(launch("j2", 0, 0), 1.0)
    started(st, "j1")
    started(st, "j2")
    new = launch("j1", 1, 0, grace_s=3.0)
    actions = st.on_command(new, 2.0)
    assert actions == [Kill(("j1", 0, 0), 3.0, "superseded by attempt 1"), Launch(new)]
    assert st.tasks[("j2", 0, 0)] == "running"


def test_kill_of_a_running_task_and_of_a_task_never_launched() -> None:
    st = registered()
    st.on_command(launch(), 1.0)
    started(st)
    assert st.on_command(kill(grace_s=7.0, why="cancelled by alice"), 2.0) == [
        Kill(("j1", 0, 0), 7.0, "cancelled by alice")
    ]
    [send] = st.on_command(kill(rank=5), 2.0)
    assert isinstance(send, Send) and send.event.rank == 5 and "not running here" in send.event.why
    # ... and a launch that arrives after its kill never runs
    assert st.on_command(launch(rank=5), 2.1) == []


def test_a_signal_reaches_a_running_task_only_and_leaves_it_running() -> None:
    """scancel --signal (ADR 0078): a running task gets it and stays running; a task still
    launching, being stopped or unknown hears nothing (and nothing is reported)."""
    st = registered()
    sig = AgentCommand.model_validate(
        {
            "kind": "signal",
            "job": "j1",
            "attempt": 0,
            "rank": 0,
            "signal": 10,
            "signal_scope": "full",
        }
    )
    st.on_command(launch(), 1.0)
    assert st.on_command(sig, 1.5) == []  # still launching: no process to signal yet
    started(st)
    assert st.on_command(sig, 2.0) == [Signal(("j1", 0, 0), 10, "full")]
    assert st.tasks[("j1", 0, 0)] == "running"
    assert st.on_command(sig.model_copy(update={"rank": 3}), 2.0) == []  # not here
    st.on_command(kill(), 3.0)
    assert st.on_command(sig, 3.5) == []  # being stopped


def test_kill_with_a_negative_rank_stops_every_rank_of_the_attempt() -> None:
    st = registered()
    for r in range(3):
        st.on_command(launch(rank=r), 1.0)
    st.on_command(launch(job="other"), 1.0)
    actions = st.on_command(kill(rank=-1), 2.0)
    assert [a.key for a in actions if isinstance(a, Kill)] == [("j1", 0, r) for r in range(3)]


def test_exit_is_reported_and_the_task_leaves_running() -> None:
    st = registered()
    st.on_command(launch(), 1.0)
    started(st)
    [send] = st.on_task(RunnerEvent("exited", ("j1", 0, 0), 137, "killed by SIGKILL"))
    assert isinstance(send, Send)
    assert (send.event.exit_code, send.event.why) == (137, "killed by SIGKILL")
    assert st.running() == []


def test_the_latest_exits_are_remembered_for_a_registration() -> None:
    """A controller restored from a backup learns from them which of the ranks it holds
    running ended meanwhile (issue 26): the latest ``most``, oldest first; a launch refused
    or a kill of a task never launched is no exit of a task that ran."""
    st = registered()
    for i in range(4):
        st.on_command(launch(f"j{i}"), 1.0)
        started(st, f"j{i}")
        st.on_task(RunnerEvent("exited", (f"j{i}", 0, 0), i, f"exit {i}"))
    st.on_command(kill("never"), 2.0)
    assert [(e.job, e.exit_code, e.why) for e in st.ended(most=2)] == [
        ("j2", 2, "exit 2"),
        ("j3", 3, "exit 3"),
    ]
    assert [e.job for e in st.ended()] == ["j0", "j1", "j2", "j3"]
    assert all(e.kind == "exited" for e in st.ended())


# ----- lease and fencing ---------------------------------------------------------------------


def test_lease_expiry_fences_every_task_once() -> None:
    st = registered(lease_s=10.0, t=0.0)
    st.on_command(launch(rank=0), 1.0)
    st.on_command(launch(rank=1), 1.0)
    started(st, rank=0)
    assert st.on_tick(9.99) == []
    actions = st.on_tick(10.0)
    assert [a.key for a in actions if isinstance(a, Kill)] == [("j1", 0, 0), ("j1", 0, 1)]
    assert all(isinstance(a, Kill) and a.grace_s == 1.5 for a in actions)
    assert all(isinstance(a, Kill) and "lease expired" in a.why for a in actions)
    assert st.fenced
    assert st.on_tick(11.0) == []  # fenced once, not on every tick


def test_heartbeats_extend_the_lease_from_when_they_were_sent() -> None:
    st = registered(lease_s=10.0, t=0.0)
    st.on_command(launch(), 1.0)
    st.on_heartbeat_ok(HeartbeatResult(lease_s=10.0), sent_at=8.0)
    assert st.on_tick(17.9) == []
    assert len(st.on_tick(18.0)) == 1
    # an answer that arrives late, about an older heartbeat, never shortens the lease
    st2 = registered(lease_s=10.0, t=0.0)
    st2.on_heartbeat_ok(HeartbeatResult(lease_s=10.0), sent_at=8.0)
    st2.on_heartbeat_ok(HeartbeatResult(lease_s=10.0), sent_at=5.0)
    assert st2.lease_until == 18.0


def test_failed_heartbeats_fence_when_the_lease_runs_out() -> None:
    st = registered(lease_s=5.0, t=0.0)
    st.on_command(launch(), 1.0)
    assert st.on_heartbeat_failed(3.0) == []
    actions = st.on_heartbeat_failed(6.0)
    assert [type(a) for a in actions] == [Kill]


def test_while_fenced_launches_are_refused_until_a_heartbeat_gets_through() -> None:
    st = registered(lease_s=5.0, t=0.0)
    st.on_tick(6.0)
    [send] = st.on_command(launch(job="late"), 6.5)
    assert isinstance(send, Send) and "lease has expired" in send.event.why
    st.on_heartbeat_ok(HeartbeatResult(lease_s=5.0), sent_at=7.0)
    assert not st.fenced
    cmd = launch(job="fresh")
    assert st.on_command(cmd, 7.1) == [Launch(cmd)]


def test_fenced_tasks_exit_reports_reach_the_outbox_for_the_reconnect() -> None:
    st = registered(lease_s=5.0, t=0.0)
    st.on_command(launch(), 1.0)
    started(st)
    [k] = st.on_tick(5.0)
    assert isinstance(k, Kill)
    [send] = st.on_task(RunnerEvent("exited", k.key, 143, f"{k.why}; killed by SIGTERM"))
    assert isinstance(send, Send) and "fenced" in send.event.why


def test_nothing_launches_before_the_first_registration() -> None:
    st = AgentState()
    [send] = st.on_command(launch(), 0.0)
    assert isinstance(send, Send) and send.event.exit_code == EXIT_REFUSED
    st.on_registered(10.0, 1.0)
    cmd = launch(job="j2")
    assert st.on_command(cmd, 1.0) == [Launch(cmd)]


def test_stale_tasks_in_a_heartbeat_answer_are_killed() -> None:
    st = registered()
    st.on_command(launch(rank=0), 1.0)
    st.on_command(launch(rank=1), 1.0)
    res = HeartbeatResult(lease_s=10.0, stale=[TaskRef(job="j1", attempt=0, rank=1)])
    [k] = st.on_heartbeat_ok(res, sent_at=2.0)
    assert isinstance(k, Kill) and k.key == ("j1", 0, 1) and "stale" in k.why
    assert st.on_heartbeat_ok(res, sent_at=3.0) == []  # already stopping


def test_a_refused_heartbeat_asks_to_register_again() -> None:
    st = registered()
    actions = st.on_heartbeat_failed(1.0, status=409)
    assert [type(a) for a in actions] == [Register]
    assert not st.registered
    assert st.on_heartbeat_failed(1.0, status=503) == []


# ----- a service replica's probes --------------------------------------------------------------


def test_a_replicas_probes_start_when_it_runs_and_only_its_running_tasks_report() -> None:
    st = registered()
    ready = Probe("http", "/ready")
    st.on_command(launch("web.1", 1, probes={"readiness": ready.to_dict()}), 1.0)
    key = ("web.1", 1, 0)
    verdict = ReplicaProbe("web.1", 1, "readiness", True, "ready: HTTP 200")
    assert st.on_probes([verdict]) == []  # launching: not running yet
    out = st.on_task(RunnerEvent("started", key))
    assert out[1:] == [StartProbes(key, (("readiness", ready),))]
    (send,) = st.on_probes([verdict, ReplicaProbe("other", 1, "liveness", False, "x")])
    assert isinstance(send, Send)
    ev = send.event
    assert (ev.kind, ev.job, ev.attempt, ev.probe, ev.ok) == (
        "probe",
        "web.1",
        1,
        "readiness",
        True,
    )
    st.on_command(kill("web.1", 1), 2.0)  # being stopped: its verdicts no longer matter
    assert st.on_probes([verdict]) == []
    out = st.on_task(RunnerEvent("exited", key, 143, "killed"))
    assert out[0] == StopProbes(key)
    # a plain job has no probes to start or stop
    st.on_command(launch("j9"), 3.0)
    assert [type(a) for a in st.on_task(RunnerEvent("started", ("j9", 0, 0)))] == [Send]
