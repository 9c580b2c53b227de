"""A signal to a running job over real HTTP (``POST /jobs/{id}/signal``, Slurm's ``scancel
--signal``, ADR 0078): its owner's or an admin's only, a job that has not started or has ended
refused (409), a signal that is not one refused (422), the signal carried to the node of each
rank that runs as an agent command of its own (not a kill: the job goes on running), and the
audit log. What the agent does with it: tests/integration/test_signal_live.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from test_api import SPEC, T0, register, serve

from gpufleet.api.schemas import AgentEvent
from gpufleet.base.clock import ManualClock
from gpufleet.server.store import Store
from support.waiting import wait_for

TWO: dict[str, Any] = {**SPEC, "workers": 2, "gpus_per_worker": 8}


def test_a_signal_reaches_each_running_rank_of_its_owners_job_and_nothing_else(
    tmp_path: Path,
) -> None:
    clock, data = ManualClock(T0), tmp_path / "controller"
    store = Store.open(f"sqlite:///{tmp_path / 'db.sqlite'}")
    try:
        with serve(store, data, clock) as api:
            alice_token, bob_token = api.token("user", user="alice"), api.token("user", user="bob")
            admin = api.raw((data / "admin.token").read_text().strip())
            alice, bob = api.raw(alice_token), api.raw(bob_token)
            agents = {n: api.agent(n) for n in ("node-0", "node-1")}
            (job,) = api.user("alice").submit(TWO)  # 2 nodes: waits until both are there

            def sig(who: Any, body: dict[str, Any], jid: str = job) -> Any:
                return who.post(f"/jobs/{jid}/signal", json=body)

            r = sig(alice, {"signal": "USR1"})
            assert r.status_code == 409, r.text  # pending: Job can not be altered now
            assert "no processes to signal" in r.json()["detail"]
            for node, agent in agents.items():
                register(agent, node)
            for node, agent in agents.items():
                (launch,) = agent.commands(node, wait_s=5)
                assert launch.kind == "launch"
                ev = AgentEvent(kind="started", job=job, attempt=1, rank=launch.rank)
                agent.events(node, [ev])
            wait_for("running", lambda: api.admin.job(job).state == "RUNNING" or None)
            assert sig(bob, {"signal": "USR1"}).status_code == 403  # another user's
            assert sig(alice, {"signal": "USR1"}, "999999").status_code == 404
            for bad in ("BOGUS", 0, 65, "1.5", True):
                assert sig(alice, {"signal": bad}).status_code == 422, bad
            assert sig(alice, {"signal": "USR1", "scope": "all"}).status_code == 422
            r = sig(alice, {"signal": "sigusr2", "scope": "full"})
            assert r.status_code == 200, r.text
            assert r.json()["state"] == "RUNNING"
            for node, agent in agents.items():
                (cmd,) = agent.commands(node, wait_s=5)
                got = (cmd.kind, cmd.job, cmd.attempt, cmd.signal, cmd.signal_scope)
                assert got == ("signal", job, 1, 12, "full"), cmd
            agents["node-1"].events(
                "node-1", [AgentEvent(kind="exited", job=job, attempt=1, rank=1)]
            )
            assert sig(admin, {"signal": 10, "scope": "batch"}).status_code == 200  # an admin
            # rank 1 has exited: only rank 0 hears it
            (cmd,) = agents["node-0"].commands("node-0", wait_s=5)
            assert (cmd.kind, cmd.rank, cmd.signal, cmd.signal_scope) == ("signal", 0, 10, "batch")
            assert agents["node-1"].commands("node-1", wait_s=0.2) == []
            assert api.admin.job(job).state != "CANCELLED"  # a signal never ends a job itself
            audit = admin.get("/audit").json()
            signals = [a for a in audit if a["action"] == "job.signal"]
            got_audit = sorted((a["detail"]["signal"], a["detail"]["scope"]) for a in signals)
            assert got_audit == [(10, "batch"), (12, "full")]
            agents["node-0"].events(
                "node-0", [AgentEvent(kind="exited", job=job, attempt=1, rank=0)]
            )
            wait_for("ended", lambda: api.admin.job(job).state == "SUCCEEDED" or None)
            r = sig(alice, {"signal": "USR1"})
            assert r.status_code == 409, r.text
    finally:
        store.close()
