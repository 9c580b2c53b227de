"""The agent through a controller outage (ADR 0031), on the pure state machine with the time as a
number: past the lease it launches nothing and its tasks run on; past the outage tolerance it
fences them. The 4-minute outage of issue 26 is tested here, with the 5-minute default."""

from __future__ import annotations

from gpufleet.agent.state import AgentState, Kill, Launch, Send
from gpufleet.agent.tasks import FENCED, RunnerEvent
from gpufleet.api.schemas import AgentCommand, HeartbeatResult, TaskRef

LEASE_S = 7.5
TOLERANCE_S = 300.0  # the controller's default (Slurm's SlurmdTimeout)


def launch(job: str, attempt: int = 1, rank: int = 0) -> AgentCommand:
    return AgentCommand.model_validate(
        {"kind": "launch", "job": job, "attempt": attempt, "rank": rank, "command": ["true"]}
    )


def running_agent(
    jobs: tuple[str, ...] = ("a", "b"), tolerance_s: float = TOLERANCE_S
) -> AgentState:
    st = AgentState(fence_grace_s=2.0, outage_tolerance_s=tolerance_s)
    st.on_registered(LEASE_S, 0.0)
    for job in jobs:
        assert st.on_command(launch(job), 1.0) == [Launch(launch(job))]
        st.on_task(RunnerEvent("started", (job, 1, 0)))
    return st


def ticks(st: AgentState, start: float, end: float, step: float = 0.5) -> list[object]:
    out: list[object] = []
    t = start
    while t <= end:
        out += st.on_tick(t)
        t += step
    return out


def test_a_four_minute_outage_kills_nothing_and_refuses_launches_meanwhile() -> None:
    st = running_agent()
    # the controller goes away at 1 s; the agent ticks through four minutes without it
    assert ticks(st, 1.0, 241.0) == []
    assert st.lapsed and not st.fenced
    assert st.running() == [
        TaskRef(job="a", attempt=1, rank=0),
        TaskRef(job="b", attempt=1, rank=0),
    ]
    [refused] = st.on_command(launch("c"), 120.0)
    assert isinstance(refused, Send) and refused.event.cause == "fenced"  # requeued, not charged
    assert "lease has expired" in refused.event.why
    # it comes back (a registration after its restart): the same tasks, launches taken again
    assert st.on_registered(LEASE_S, 241.0) == []
    assert not st.lapsed
    assert st.on_command(launch("d"), 241.5) == [Launch(launch("d"))]
    assert ticks(st, 241.5, 248.0) == []


def test_past_the_tolerance_every_task_is_fenced_once() -> None:
    st = running_agent()
    assert ticks(st, 1.0, 299.5) == []
    kills = st.on_tick(300.0)
    assert [k.key for k in kills if isinstance(k, Kill)] == [("a", 1, 0), ("b", 1, 0)]
    assert all(isinstance(k, Kill) and k.why.startswith(FENCED) for k in kills)
    assert "outage tolerance expired" in kills[0].why  # type: ignore[union-attr]
    assert st.on_tick(301.0) == []  # once


def test_the_tolerance_counts_from_the_last_answered_heartbeat() -> None:
    st = running_agent()
    st.on_heartbeat_ok(HeartbeatResult(lease_s=LEASE_S), 100.0)
    assert ticks(st, 100.0, 399.5) == []
    assert len(st.on_tick(400.0)) == 2


def test_without_a_tolerance_from_the_controller_the_lease_fences_as_before() -> None:
    st = running_agent(tolerance_s=0.0)  # an older controller sends none
    assert st.on_tick(7.0) == []
    kills = st.on_tick(7.5)
    assert len(kills) == 2 and "(lease expired)" in kills[0].why  # type: ignore[union-attr]


def test_a_tolerance_shorter_than_the_lease_fences_at_the_lease() -> None:
    st = running_agent(tolerance_s=1.0)
    assert st.fence_until == st.lease_until == LEASE_S
    assert st.on_tick(7.4) == []
    assert len(st.on_tick(7.5)) == 2


def test_lapsed_launches_are_refused_even_between_ticks() -> None:
    st = running_agent(jobs=())
    # no tick has run since the lease ended: the launch is judged on its own time
    [refused] = st.on_command(launch("x"), LEASE_S + 0.1)
    assert isinstance(refused, Send) and refused.event.cause == "fenced"
    assert st.running() == []
