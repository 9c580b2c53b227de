"""Authorization over real HTTP on SQLite and PostgreSQL (test_api.py's server and agents): an
agent reports only ranks placed on its own node; a bad token costs one store read and its
client is limited after a burst of failures, while valid tokens are never limited; the last
admin token cannot be revoked and a controller always starts; jobs submitted after a restart
are listed; GET /jobs comes in pages that a client follows."""

from __future__ import annotations

from pathlib import Path

import httpx
import sqlalchemy as sa
from test_api import (  # test_api.py sits next to this file (pytest puts its folder on the path)
    SPEC,
    T0,
    Api,
    refused,
    register,
    serve,
    started,
    wait_for,
)

from gpufleet.api import schemas as s
from gpufleet.base.clock import ManualClock
from gpufleet.client import Client
from gpufleet.client.http import AgentClient
from gpufleet.server import ratelimit
from gpufleet.server.store import Store
from gpufleet.server.store.schema import tokens as tokens_table

# ----- an agent speaks only for its node ------------------------------------------------------


def _running_on_node_1(api: Api) -> tuple[AgentClient, AgentClient, str, int]:
    a0, a1 = api.agent("node-0"), api.agent("node-1")
    register(a0, "node-0")
    register(a1, "node-1")
    api.admin.drain("node-0")
    (job,) = api.user("alice").submit(SPEC)
    (cmd,) = a1.commands("node-1", wait_s=5)
    started(a1, "node-1", [cmd])
    wait_for("running", lambda: api.admin.job(job).state == "RUNNING")
    return a0, a1, job, cmd.attempt


def test_an_agent_may_not_end_or_start_a_rank_on_another_node(api: Api) -> None:
    a0, a1, job, attempt = _running_on_node_1(api)
    exited = s.AgentEvent(kind="exited", job=job, attempt=attempt, rank=0, exit_code=0)
    msg = refused(403, lambda: a0.events("node-0", [exited]))
    assert f"events[0]: rank 0 of job {job} (attempt {attempt}) runs on node node-1" in msg
    # hidden behind an event about nothing, in a batch, or in a registration's backlog
    noise = s.AgentEvent(kind="started", job="999", attempt=1, rank=0)
    assert "events[1]:" in refused(403, lambda: a0.events("node-0", [noise, exited]))
    again = s.AgentRegister(
        node="node-0",
        address="127.0.0.1",
        gpu_model="H100-SXM",
        gpus=[s.GpuInfo(index=0, uuid="GPU-node-0-0", model="H100-SXM", memory_mib=81559)],
        cpu_cores=64,
        memory_gib=256,
        events=[exited],
    )
    assert "events[0]:" in refused(403, lambda: a0.register(again))
    # nor say it is stopping another node's rank (a restarted core would stop its job)
    stopping = again.model_copy(
        update={"events": [], "stopping": [s.TaskRef(job=job, attempt=attempt, rank=0)]}
    )
    assert "stopping[0]: rank 0" in refused(403, lambda: a0.register(stopping))
    # nor report a probe's verdict on another node's replica (a liveness failure kills it)
    dead = s.AgentEvent(kind="probe", job=job, attempt=attempt, rank=0, probe="liveness")
    assert "events[0]: rank 0" in refused(403, lambda: a0.events("node-0", [dead]))
    # a probe event names its probe, and only a probe event does
    half = {"kind": "probe", "job": job, "attempt": attempt, "rank": 0}
    r = a0.http.post("/api/v1/agent/node-0/events", json={"events": [half]})
    assert r.status_code == 422 and "probe: readiness or liveness" in r.text
    # a negative rank is refused at the edge (the client's own model refuses it too: send it raw)
    negative = {"kind": "exited", "job": job, "attempt": attempt, "rank": -1, "exit_code": 0}
    r = a0.http.post("/api/v1/agent/node-0/events", json={"events": [negative]})
    assert r.status_code == 422 and "body.events.0.rank" in r.text
    # nothing of it reached the core: the job runs on, and node-1 is not told it is stale
    assert api.admin.job(job).state == "RUNNING"
    running = s.TaskRef(job=job, attempt=attempt, rank=0)
    assert a1.heartbeat("node-1", s.Heartbeat(running=[running])).stale == []
    # its own node may report on it: about a job that is no replica, the core hears nothing
    a1.events("node-1", [dead.model_copy(update={"why": "not a replica"})])
    assert api.admin.job(job).state == "RUNNING"
    # the node that runs it may end it
    a1.events("node-1", [exited])
    wait_for("succeeded", lambda: api.admin.job(job).state == "SUCCEEDED")


# ----- bad tokens: one store read each, a limit per client ------------------------------------


def test_a_bad_token_costs_one_store_read_and_a_client_that_keeps_failing_waits(api: Api) -> None:
    cache = api.app.state.tokens
    alice = api.user("alice")
    assert alice.jobs() == []
    bad = api.raw("gf_not-a-token")
    before = cache.lookups
    for _ in range(5):
        assert bad.get("/jobs").status_code == 401
    assert cache.lookups == before + 1  # the same bad secret again: remembered, not read
    # a burst of failures (new secrets each time) from this address, then 429 with Retry-After
    for i in range(ratelimit.BURST - 5):
        assert api.raw(f"gf_guess-{i}").get("/jobs").status_code == 401
    r = api.raw("gf_one-more").get("/jobs")
    assert r.status_code == 429, r.text
    assert int(r.headers["retry-after"]) >= 1 and "too many failed" in r.json()["detail"]
    reads = cache.lookups
    assert api.raw("gf_and-another").get("/jobs").status_code == 429
    assert cache.lookups == reads  # refused before any read
    # the same address with valid tokens is not limited: alice, the admin, an agent
    assert alice.jobs() == []
    assert api.admin.tokens()
    register(api.agent("node-0"), "node-0")
    # a token made now is known at once, even one whose secret was refused a moment ago
    assert api.user("bob").jobs() == []
    # the limit lifts with time (the controller's clock)
    api.clock.advance(int(r.headers["retry-after"]))
    assert api.raw("gf_later").get("/jobs").status_code == 401


def test_a_remembered_failure_expires_and_a_new_token_is_not_taken_for_one(api: Api) -> None:
    cache = api.app.state.tokens
    bad = api.raw("gf_unknown")
    assert bad.get("/jobs").status_code == 401
    n = cache.lookups
    api.clock.advance(61)  # past the negative cache's 60 s
    assert bad.get("/jobs").status_code == 401
    assert cache.lookups == n + 1


# ----- the last admin token, and a start that always works --------------------------------------


def test_the_last_admin_token_cannot_be_revoked(api: Api) -> None:
    msg = refused(409, lambda: api.admin.revoke_token("admin"))
    assert "'admin' is the last active admin token" in msg
    other = api.token("admin")
    second = Client(api.url, other)
    api.clients.append(second)
    second.revoke_token("admin")  # another admin remains: allowed
    name = next(t.name for t in second.tokens() if t.role == "admin" and t.name != "admin")
    assert "last active admin token" in refused(409, lambda: second.revoke_token(name))
    assert second.tokens()  # still an admin


def test_a_controller_starts_with_every_admin_token_revoked(db_url: str, tmp_path: Path) -> None:
    """As an older version (or fuzzing) could leave it: the start makes ``admin-2``."""
    data = tmp_path / "controller"
    store = Store.open(db_url)
    try:
        with serve(store, data, ManualClock(T0)):
            pass
        with store.engine.begin() as c:
            c.execute(sa.update(tokens_table).values(revoked_time=T0))
        (data / "admin.token").unlink()
        with serve(store, data, ManualClock(T0 + 1)) as again:  # reads the new admin.token
            assert again.admin.tokens()  # the new admin token works
            active = store.tokens(include_revoked=False)
            assert [t.name for t in active if t.role == "admin"] == ["admin-2"]
    finally:
        store.close()


# ----- listings after a restart, and in pages ---------------------------------------------------


def test_jobs_submitted_after_a_restart_are_listed(db_url: str, tmp_path: Path) -> None:
    clock, data = ManualClock(T0), tmp_path / "controller"
    store = Store.open(db_url)
    try:
        with serve(store, data, clock) as a:
            user = a.token("user", user="alice")
            agent = a.token("agent", node="node-0")
            alice, a0 = Client(a.url, user), AgentClient(a.url, agent)
            a.clients += [alice, a0]
            # never fits one node: it stays pending, unfinished, across the restart (sent
            # before the node registers: a cluster of no node yet refuses nothing as too big)
            (pending,) = alice.submit({**SPEC, "workers": 2, "gpus_per_worker": 8})
            register(a0, "node-0")
            (done,) = alice.submit({**SPEC, "name": "done"})  # the store's newest: finished
            (cmd,) = a0.commands("node-0", wait_s=5)
            assert cmd.job == done
            a0.events("node-0", [s.AgentEvent(kind="exited", job=done, attempt=1, rank=0)])
            wait_for("done", lambda: alice.job(done).state == "SUCCEEDED")
        clock.advance(1)
        with serve(store, data, clock) as a:
            alice = Client(a.url, user)
            a.clients.append(alice)
            (new,) = alice.submit({**SPEC, "name": "new"})
            assert [j.id for j in alice.jobs(all_states=True)] == [new, done, pending]
            assert [j.id for j in alice.jobs(state="pending")] == [new, pending]
            assert [j.id for j in alice.jobs(state="succeeded")] == [done]
            assert [j.id for j in alice.jobs()] == [new, pending]
    finally:
        store.close()


def test_jobs_come_in_pages_that_the_client_follows(api: Api) -> None:
    alice = api.user("alice")
    # three arrays (an array holds at most MaxArraySize = 1001 tasks)
    ids = [
        i
        for arr in ("0-999", "0-999", "0-499")
        for i in alice.submit({**SPEC, "gpus_per_worker": 8}, array=arr)
    ]
    newest_first = sorted(ids, key=int, reverse=True)
    token = alice.http.headers["authorization"].split()[1]
    raw = api.raw(token)
    r = raw.get("/jobs", params={"limit": 1000})
    assert r.status_code == 200 and len(r.json()) == 1000
    pages = [r.json()]
    while "next" in r.links:
        r = httpx.get(api.url + r.links["next"]["url"], headers=raw.headers)
        assert r.status_code == 200
        pages.append(r.json())
    assert [len(p) for p in pages] == [1000, 1000, 500]
    assert [j["id"] for p in pages for j in p] == newest_first
    assert [j.id for j in alice.jobs(limit=2500)] == newest_first
    assert [j.id for j in alice.jobs(limit=1200)] == newest_first[:1200]
    r = raw.get("/jobs", params={"limit": 1001})
    assert r.status_code == 422 and "limit" in r.text
    r = raw.get("/jobs", params={"cursor": "x1"})
    assert r.status_code == 422 and "cursor:" in r.json()["detail"]
