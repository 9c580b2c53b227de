"""Rolling maintenance over real HTTP on SQLite and PostgreSQL (test_api.py's server and
scripted agents, a ManualClock): bad input refused all at once with nothing stored; only admins
start it; past the drain deadline a node's job is stopped and requeued, not charged; the
operator's command reaches the node's agent as a node command and the node returns when the
agent reports it ended well."""

from __future__ import annotations

import pytest
from test_api import T0, Api, refused, register, wait_for

from gpufleet.api import schemas as s
from gpufleet.api.nodecommands import NodeCommandResult
from gpufleet.client import Client
from gpufleet.client.http import AgentClient

BIG = {"name": "big", "gpus_per_worker": 8, "command": ["sleep", "1000"]}


def test_bad_input_is_refused_all_at_once_and_nothing_is_stored(api: Api) -> None:
    register(api.agent("node-0"), "node-0")
    body = {
        "nodes": "node-[0-1]",
        "batch": "0%",
        "run": "",
        "validate_layers": ["device", "application"],
        "soak_s": 60.0,
        "window": "nope",
    }
    text = refused(422, lambda: api.admin.start_maintenance(body))
    for part in (
        "no node node-1",
        "'0%': a percentage",
        "give the command to run",
        "'application'",
        "a soak follows a canary",
        "no reservation nope",
    ):
        assert part in text, (part, text)
    assert api.admin.maintenances() == [] and api.store.maintenances() == []
    alice = api.user("alice")
    refused(403, lambda: alice.start_maintenance({"nodes": "node-0", "run": "true"}))
    refused(403, lambda: alice.run_on_node("node-0", "id"))


def big_job_placed(api: Api) -> tuple[dict[str, AgentClient], Client, str, str]:
    """node-0 and node-1 registered; alice's whole-node job placed on one: (the agents, alice,
    the job, its node)."""
    agents = {n: api.agent(n) for n in ("node-0", "node-1")}
    for n, a in agents.items():
        register(a, n)
    alice = api.user("alice")
    (jid,) = alice.submit(BIG)
    node = wait_for("placed", lambda: (j := alice.job(jid)).placement and j.placement[0].node)
    return agents, alice, jid, node


def execs(agent: AgentClient, node: str) -> list[s.AgentCommand]:
    return [c for c in agent.commands(node, wait_s=0.2) if c.kind == "exec"]


@pytest.mark.both_stores
def test_past_the_deadline_the_job_is_requeued_then_the_command_runs_and_the_node_returns(
    api: Api,
) -> None:
    agents, alice, jid, node = big_job_placed(api)
    assert [c.kind for c in agents[node].commands(node, wait_s=1)] == ["launch"]
    agents[node].events(node, [s.AgentEvent(kind="started", job=jid, attempt=1, rank=0)])
    m = api.admin.start_maintenance(
        {"nodes": node, "batch": "1", "run": "fw-update", "deadline_s": 60.0}
    )
    wait_for("drained", lambda: api.admin.maintenance(m.id).nodes[0].phase == "draining")
    assert alice.job(jid).state == "RUNNING"
    api.clock.advance(61.0)
    kill = wait_for(
        "the job stopped",
        lambda: [c for c in agents[node].commands(node, wait_s=0.2) if c.kind == "kill"],
    )
    assert kill[0].job == jid
    ev = s.AgentEvent(kind="exited", job=jid, attempt=1, rank=0, exit_code=-15, why="killed")
    agents[node].events(node, [ev])
    j = wait_for("requeued", lambda: (j := alice.job(jid)).attempt == 2 and j)
    assert j.retries_used == 0  # not charged
    assert any("drain deadline" in e.why for e in j.events or [])
    (cmd,) = wait_for("the command sent", lambda: execs(agents[node], node))
    assert (cmd.job, cmd.command) == (f"{m.id}.0.run", ["fw-update"])
    res = NodeCommandResult(id=cmd.job, exit_code=0, output="flashed", started=T0, ended=T0 + 62)
    agents[node].command_result(node, res)
    done = wait_for("done", lambda: (x := api.admin.maintenance(m.id)).state == "done" and x)
    assert done.nodes[0].phase == "done"
    assert {n.name: n.state for n in api.admin.nodes()}[node] != "drained"
    assert api.admin.node_command(cmd.job).output == "flashed"


def test_bound_to_a_window_it_waits_for_it_to_open_and_its_nodes_must_be_in_it(api: Api) -> None:
    for n in ("node-0", "node-1"):
        register(api.agent(n), n)
    api.admin.create_reservation(
        {"nodes": "node-0", "start": T0 + 600, "duration_s": 3600.0, "maint": True, "name": "w"}
    )
    text = refused(
        422,
        lambda: api.admin.start_maintenance({"nodes": "node-[0-1]", "run": "x", "window": "w"}),
    )
    assert "node-1 not in w" in text
    m = api.admin.start_maintenance({"nodes": "node-0", "run": "x", "window": "w"})
    assert m.state == "waiting for window" and m.window == "w"
    wait_for("a round", lambda: api.admin.maintenance(m.id).state == "waiting for window")
    assert {n.name: n.state for n in api.admin.nodes()}["node-0"] == "idle"
    api.clock.advance(600.0)
    wait_for("drained", lambda: api.admin.maintenance(m.id).nodes[0].phase != "pending")
    assert api.admin.maintenance(m.id).state == "running"


def test_a_cancelled_rollout_starts_nothing_more_and_leaves_its_draining_node_drained(
    api: Api,
) -> None:
    agents, alice, jid, node = big_job_placed(api)
    agents[node].events(node, [s.AgentEvent(kind="started", job=jid, attempt=1, rank=0)])
    other = next(n for n in agents if n != node)
    m = api.admin.start_maintenance({"nodes": f"{node},{other}", "batch": "1", "run": "x"})
    wait_for("draining", lambda: api.admin.maintenance(m.id).nodes[0].phase == "draining")
    refused(409, lambda: api.admin.confirm_maintenance(m.id))  # no canary awaits it
    done = api.admin.cancel_maintenance(m.id)
    assert done.state == "cancelled" and "cancelled by admin" in done.why
    refused(409, lambda: api.admin.cancel_maintenance(m.id))  # ended
    agents[node].events(node, [s.AgentEvent(kind="exited", job=jid, attempt=1, rank=0)])
    wait_for("the job ended", lambda: alice.job(jid).state == "SUCCEEDED")
    states = {n.name: n.state for n in api.admin.nodes()}
    assert states[node] == "drained" and states[other] == "idle"
    assert execs(agents[node], node) == []  # nothing run
    assert api.admin.maintenance(m.id).nodes[1].phase == "pending"


def test_a_node_that_never_answers_its_command_fails_past_its_time_limit(api: Api) -> None:
    agent = api.agent("node-0")
    register(agent, "node-0")
    m = api.admin.start_maintenance({"nodes": "node-0", "run": "x", "timeout_s": 30.0})
    wait_for("the command sent", lambda: execs(agent, "node-0"))  # taken, never answered
    api.clock.advance(149.0)
    wait_for("a round", lambda: api.admin.maintenance(m.id).nodes[0].phase == "running")
    api.clock.advance(2.0)
    done = wait_for("failed", lambda: (x := api.admin.maintenance(m.id)).state == "failed" and x)
    assert "no answer from the node within 150 s" in done.nodes[0].why
