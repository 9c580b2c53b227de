"""Held jobs over real HTTP (``POST /jobs/{id}/hold``, ADR 0074), on SQLite and PostgreSQL:
Slurm 22.05's rules of who holds and releases (tests/integration/test_hold_vs_slurm.py has
what a real Slurm answered), the Reason squeue prints, and a hold kept by the store through a
controller restart, with the job in its place by arrival once released."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from test_api import SPEC, T0, AgentClient, register, serve

from gpufleet.base.clock import ManualClock
from gpufleet.client import Client
from gpufleet.server.routers.holds import next_hold
from gpufleet.server.store import Store
from support.waiting import wait_for

WHOLE: dict[str, Any] = {**SPEC, "gpus_per_worker": 8}


def hold(http: httpx.Client, job: str, action: str) -> httpx.Response:
    return http.post(f"/jobs/{job}/hold", json={"action": action})


def reason(c: Client, job: str) -> str | None:
    j = c.job(job)
    return None if j.reason is None else j.reason.code


def test_who_may_hold_and_release_as_slurm() -> None:
    # (the hold now, the action, an admin asks) → the hold after; None: refused (403)
    assert next_hold("", "hold", False) == "user"  # a user's scontrol hold: a user hold
    assert next_hold("", "hold", True) == "admin"
    assert next_hold("admin", "uhold", True) == "user"  # root's uhold of an admin hold
    assert next_hold("user", "release", False) == ""
    assert next_hold("admin", "release", False) is None  # Access/permission denied
    assert next_hold("admin", "hold", False) == "admin"  # a user's hold leaves it (rc 0)
    assert next_hold("admin", "uhold", False) == "admin"
    assert next_hold("", "release", False) == ""  # releasing a job not held: no error


@pytest.mark.both_stores
def test_a_hold_is_kept_through_a_restart_and_the_job_keeps_its_place(
    db_url: str, tmp_path: Path
) -> None:
    clock, data = ManualClock(T0), tmp_path / "controller"
    store = Store.open(db_url)
    try:
        with serve(store, data, clock) as api:
            alice_token, bob_token = api.token("user", user="alice"), api.token("user", user="bob")
            agent_token = api.token("agent", node="node-0")
            admin_token = (data / "admin.token").read_text().strip()
            alice, admin = Client(api.url, alice_token), api.raw(admin_token)
            api.clients.append(alice)
            (held,) = alice.submit({**WHOLE, "hold": True})  # sbatch -H
            (after,) = alice.submit(WHOLE)
            (other,) = alice.submit(WHOLE)
            wait_for("the Reasons", lambda: reason(alice, held) == "JobHeldUser" or None)
            assert alice.job(held).reason.estimated_start is None  # type: ignore[union-attr]
            http, bob = api.raw(alice_token), api.raw(bob_token)
            assert hold(bob, other, "hold").status_code == 403  # not bob's job
            assert hold(admin, other, "hold").status_code == 200
            wait_for("an admin hold", lambda: reason(alice, other) == "JobHeldAdmin" or None)
            r = hold(http, other, "release")
            assert r.status_code == 403 and "only an admin" in r.json()["detail"], r.text
            assert hold(http, other, "uhold").status_code == 200  # leaves the admin's hold
            assert hold(http, held, "hold").status_code == 200  # held already: no change
            events = [e.why for e in alice.job(other).events or []]
            assert events[0] == "submitted" and events[1].startswith("held (admin hold) by admin:")
        with serve(store, data, clock) as api:
            alice = Client(api.url, alice_token)
            agent = AgentClient(api.url, agent_token)
            api.clients += [alice, agent]
            wait_for("the Reasons again", lambda: reason(alice, held) == "JobHeldUser" or None)
            assert reason(alice, other) == "JobHeldAdmin"
            register(agent, "node-0")
            (first,) = agent.commands("node-0", wait_s=5)
            assert first.job == after  # the one not held
            http = api.raw(alice_token)
            assert hold(http, held, "release").status_code == 200
            assert hold(api.raw(admin_token), other, "release").status_code == 200
            assert alice.job(held).state == "PENDING" and reason(alice, held) != "JobHeldUser"
            ended = hold(http, after, "hold")
            assert ended.status_code == 200  # running: kept for a requeue, as Slurm's rc 0
    finally:
        store.close()
