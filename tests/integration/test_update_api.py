"""A submitted job changed over real HTTP (``PATCH /jobs/{id}``, Slurm's scontrol update,
ADR 0076), on SQLite and PostgreSQL: Slurm 22.05's rules of who changes what and when
(tests/integration/test_update_vs_slurm.py has what a real Slurm answered), every problem at
once with nothing changed, the audit log, and the change kept by the store through a controller
restart and seen by the next pass (the smaller job starts where the bigger one could not)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from test_api import SPEC, T0, AgentClient, register, serve

from gpufleet.api.schemas import AgentEvent
from gpufleet.base.clock import ManualClock
from gpufleet.client import Client
from gpufleet.server.store import Store
from support.waiting import wait_for

TOO_BIG: dict[str, Any] = {**SPEC, "gpus_per_worker": 8, "workers": 4, "time_limit_s": 600}


def patch(http: httpx.Client, job: str, **changes: Any) -> httpx.Response:
    return http.patch(f"/jobs/{job}", json=changes)


def problems(r: httpx.Response) -> dict[str, str]:
    return {p["field"]: p["message"] for p in r.json()["errors"]}


@pytest.mark.both_stores
def test_a_jobs_update_is_ruled_as_slurms_kept_through_a_restart_and_scheduled(
    db_url: str, tmp_path: Path
) -> None:
    clock, data = ManualClock(T0), tmp_path / "controller"
    store = Store.open(db_url)
    try:
        with serve(store, data, clock) as api:
            alice_token, bob_token = api.token("user", user="alice"), api.token("user", user="bob")
            agent_token = api.token("agent", node="node-0")
            admin = api.raw((data / "admin.token").read_text().strip())
            alice = Client(api.url, alice_token)
            api.clients.append(alice)
            (job,) = alice.submit(TOO_BIG)  # 4 nodes: waits (node-0 is the cluster's one)
            http, bob = api.raw(alice_token), api.raw(bob_token)
            assert patch(bob, job, name="x").status_code == 403  # Slurm: Invalid user id
            assert patch(http, "999999", name="x").status_code == 404
            assert patch(http, job, name="").status_code == 422  # the body's schema refuses it
            r = patch(http, job, priority=5, name="y", queues=["nope"], time_limit_s=1200)
            assert r.status_code == 403, r.text  # a permission first, then the rest
            assert set(problems(r)) == {"body.priority", "body.queue"}, r.text
            assert problems(r)["body.priority"].startswith("Access/permission denied")
            assert alice.job(job).spec["name"] == SPEC["name"]  # nothing changed
            r = patch(http, job, name="smaller", workers=1, time_limit_s=1200)
            assert r.status_code == 200, r.text  # a pending job's limit: raised by its user
            assert (r.json()["spec"]["name"], r.json()["spec"]["workers"]) == ("smaller", 1)
            assert patch(admin, job, priority=7).status_code == 200
            audit = admin.get("/audit").json()
            updates = [a for a in audit if a["action"] == "job.update"]
            got = sorted((a["detail"]["fields"], a["target"]) for a in updates)  # newest first
            assert got == [(["name", "time_limit_s", "workers"], job), (["priority"], job)]
            assert "alice" in updates[1]["actor"] and "admin" in updates[0]["actor"]
        with serve(store, data, clock) as api:
            alice, agent = Client(api.url, alice_token), AgentClient(api.url, agent_token)
            api.clients += [alice, agent]
            spec = alice.job(job).spec
            got = [spec[k] for k in ("name", "workers", "time_limit_s", "priority")]
            assert got == ["smaller", 1, 1200, 7]
            register(agent, "node-0")
            (first,) = agent.commands("node-0", wait_s=5)
            assert first.job == job  # one node now: it starts
            agent.events("node-0", [AgentEvent(kind="started", job=job, attempt=1, rank=0)])
            wait_for("running", lambda: alice.job(job).state == "RUNNING" or None)
            http = api.raw(alice_token)
            r = patch(http, job, time_limit_s=1800, queues=["default"])
            assert r.status_code == 403, r.text
            assert problems(r)["body.queues"].startswith("Job is no longer pending execution")
            assert patch(http, job, time_limit_s=60).status_code == 200  # lowered: its user may
            assert alice.job(job).spec["time_limit_s"] == 60
            bob = api.raw(bob_token)
            assert bob.post(f"/jobs/{job}/requeue").status_code == 403
            r = http.post(f"/jobs/{job}/requeue")  # scontrol requeue: its own, running
            assert r.status_code == 200, r.text
            (stop,) = agent.commands("node-0", wait_s=5)
            assert stop.kind == "kill" and stop.job == job, stop  # the attempt stopped first
            assert alice.job(job).state == "RUNNING"  # not pending while its rank lives
            agent.events("node-0", [AgentEvent(kind="exited", job=job, attempt=1, rank=0)])
            (again,) = agent.commands("node-0", wait_s=5)  # pending, then started again
            assert (again.kind, again.job, again.attempt) == ("launch", job, 2), again
            audit = api.raw((data / "admin.token").read_text().strip()).get("/audit").json()
            assert "job.requeue" in [a["action"] for a in audit]
    finally:
        store.close()
