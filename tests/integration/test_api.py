"""The REST API over real HTTP on 127.0.0.1 (uvicorn in a thread, the app's lifespan running the
controller loop), on SQLite and on PostgreSQL (``db_url`` in tests/conftest.py: an empty
database per test). The controller's clock is a ManualClock: no heartbeat deadline passes unless
a test moves it. A scripted agent (``gpufleet.client.AgentClient``) stands in for a node where a
test needs jobs to start and end.

Covers: 401 (no token, wrong scheme, unknown and revoked tokens) and 403 (other users' jobs,
admin endpoints, agents reporting for another node) that say why; 422 naming the field for bad
input, with nothing stored after it; idempotency keys; arrays; afterok/afterany; the audit log;
the published OpenAPI schema."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpufleet.api import schemas as s
from gpufleet.base.clock import ManualClock
from gpufleet.client import ApiError, Client
from gpufleet.client.http import AgentClient
from gpufleet.server.app import create_app
from gpufleet.server.config import ServerConfig
from gpufleet.server.store import Store
from support import ports
from support.serving import serve_app
from support.waiting import wait_for

T0 = 1_700_000_000.0
SPEC: dict[str, Any] = {"name": "hello", "gpus_per_worker": 1, "command": ["echo", "hi"]}


@dataclass
class Api:
    url: str
    clock: ManualClock
    store: Store
    app: Any
    admin: Client
    clients: list[Any] = field(default_factory=list)
    _n: int = 0

    def token(self, role: str, *, user: str | None = None, node: str | None = None) -> str:
        self._n += 1
        out = self.admin.create_token(
            s.TokenCreate(name=f"{role}-{user or node}-{self._n}", role=role, user=user, node=node)
        )
        assert out.token
        return out.token

    def user(self, name: str) -> Client:
        c = Client(self.url, self.token("user", user=name))
        self.clients.append(c)
        return c

    def agent(self, node: str) -> AgentClient:
        c = AgentClient(self.url, self.token("agent", node=node))
        self.clients.append(c)
        return c

    def raw(self, token: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        c = httpx.Client(base_url=self.url + "/api/v1", headers=headers, timeout=30)
        self.clients.append(c)
        return c

    def stored_ids(self) -> list[str]:
        return [j.id for j in self.store.list_jobs(limit=None)]


@contextlib.contextmanager
def serve(store: Store, data_dir: Path, clock: ManualClock, **config: Any) -> Iterator[Api]:
    """The controller app on a free port in a thread, its lifespan (the service loop) on;
    ``config``: other ServerConfig settings."""
    config.setdefault("min_pass_gap_s", 0.0)  # the ManualClock stands still: no gap to wait
    config = {**ports.gateway_ports(), **config}  # not another xdist worker's endpoints
    app = create_app(ServerConfig(data_dir=data_dir, **config), store=store, clock=clock)
    with serve_app(app) as url:
        token = (data_dir / "admin.token").read_text().strip()
        a = Api(url, clock, store, app, Client(url, token))
        try:
            yield a
        finally:
            for c in [a.admin, *a.clients]:
                c.close()


def register(
    agent: AgentClient, node: str, gpus: int = 8, labels: dict[str, str] | None = None
) -> None:
    agent.register(
        s.AgentRegister(
            node=node,
            address="127.0.0.1",
            gpu_model="H100-SXM",
            gpus=[
                s.GpuInfo(index=i, uuid=f"GPU-{node}-{i}", model="H100-SXM", memory_mib=81559)
                for i in range(gpus)
            ],
            cpu_cores=64,
            memory_gib=256,
            labels=labels or {},
        )
    )


def events(j: s.JobOut) -> list[tuple[int, str]]:
    return [(e.attempt, e.state) for e in j.events or []]


def refused(status: int, call: Callable[[], Any]) -> str:
    """The call fails with ``status``; the server's explanation as text."""
    with pytest.raises(ApiError) as e:
        call()
    assert e.value.status == status, e.value
    return str(e.value)


# ----- meta ---------------------------------------------------------------------------------


def test_openapi_schema_is_served_without_a_token(api: Api) -> None:
    r = httpx.get(api.url + "/api/v1/openapi.json", timeout=120)  # built on first request
    assert r.status_code == 200
    doc = r.json()
    assert doc["openapi"].startswith("3.")
    for path in ("/api/v1/jobs", "/api/v1/jobs/{job_id}/cancel", "/api/v1/agent/register"):
        assert path in doc["paths"], path
    assert "JobSubmit" in doc["components"]["schemas"]


# ----- 401 ----------------------------------------------------------------------------------


def test_401_without_a_token_says_how_to_get_one(api: Api) -> None:
    for headers in ({}, {"Authorization": "Basic dXNlcjpwdw=="}, {"Authorization": "Bearer"}):
        r = httpx.get(api.url + "/api/v1/jobs", headers=headers)
        assert r.status_code == 401, headers
        assert "missing bearer token" in r.json()["detail"]
        assert "gpufleet token create" in r.json()["detail"]
        assert r.headers["www-authenticate"] == "Bearer"


def test_401_with_an_unknown_or_revoked_token(api: Api) -> None:
    r = api.raw("gf_not-a-token").get("/jobs")
    assert r.status_code == 401 and "invalid or revoked token" in r.json()["detail"]

    alice = api.user("alice")
    assert alice.jobs() == []  # the token works (and is now cached by the server)
    name = next(t.name for t in api.admin.tokens() if t.user == "alice")
    api.admin.revoke_token(name)
    msg = refused(401, alice.jobs)
    assert "revoked" in msg
    assert refused(404, lambda: api.admin.revoke_token(name))  # revoked already
    assert name in {t.name for t in api.admin.tokens()}  # still listed, for the record


# ----- 403 ----------------------------------------------------------------------------------


def test_403_a_user_cancels_or_reads_only_their_own_jobs(api: Api) -> None:
    alice, bob = api.user("alice"), api.user("bob")
    (job,) = alice.submit(SPEC)
    msg = refused(403, lambda: bob.cancel(job))
    assert "belongs to alice" in msg and "bob" in msg
    refused(403, lambda: bob.job(job))
    refused(403, lambda: bob.logs(job))
    assert alice.job(job).state == "PENDING"  # the refused cancel changed nothing
    assert alice.cancel(job).id == job
    assert wait_for("cancelled", lambda: alice.job(job).state == "CANCELLED")
    msg = refused(409, lambda: alice.cancel(job))
    assert "already ended (CANCELLED)" in msg


def test_a_user_token_lists_only_its_own_jobs(api: Api) -> None:
    alice, bob = api.user("alice"), api.user("bob")
    a = alice.submit(SPEC)
    b = bob.submit(SPEC)
    assert [j.id for j in alice.jobs()] == a
    assert [j.id for j in bob.jobs(all_states=True)] == b
    msg = refused(403, lambda: alice.jobs(user="bob"))
    assert "alice" in msg and "bob" in msg
    assert [j.id for j in alice.jobs(user="alice")] == a
    assert sorted(j.id for j in api.admin.jobs()) == sorted(a + b)
    assert [j.id for j in api.admin.jobs(user="bob")] == b
    msg = refused(403, lambda: alice.submit({**SPEC, "user": "bob"}))
    assert "submits as alice, not bob" in msg
    assert api.stored_ids() == sorted(a + b)


def test_a_brief_listing_holds_what_a_listing_prints_of_the_spec(api: Api) -> None:
    from gpufleet.server.listing import BRIEF_SPEC

    spec = {**SPEC, "name": "b", "command": ["sh", "-c", "x" * 4000], "priority": 3}
    job = api.admin.submit(spec, array="0-2")
    full = api.admin.jobs(limit=2)
    brief = api.admin.jobs(limit=2, brief=True)
    assert [j.id for j in brief] == [j.id for j in full] and len(brief) == 2
    for b, f in zip(brief, full, strict=True):
        assert b.spec == {k: v for k, v in f.spec.items() if k in BRIEF_SPEC}
        assert b.spec["priority"] == 3 and "command" in f.spec
        assert b.model_dump(exclude={"spec"}) == f.model_dump(exclude={"spec"})
    assert [j.id for j in api.admin.jobs(limit=3, brief=True)] == sorted(job, reverse=True)


def test_403_a_user_calls_admin_endpoints(api: Api) -> None:
    alice = api.user("alice")
    calls: list[Callable[[], Any]] = [
        lambda: alice.create_token(s.TokenCreate(name="mine", role="admin")),
        alice.tokens,
        lambda: alice.revoke_token("admin"),
        alice.audit,
        lambda: alice.drain("node-0"),
        lambda: alice.resume("node-0"),
        lambda: alice.update_queue("default", s.QueueUpdate(weight=5)),
    ]
    for call in calls:
        msg = refused(403, call)
        assert "a user token may not do this (needs: admin)" in msg
    assert "mine" not in {t.name for t in api.admin.tokens()}
    # the one queue of a cluster without a queue file, unchanged by the refused update
    assert [(q.name, q.weight) for q in api.admin.queues()] == [("default", 1.0)]


POLL = """
import os, sys, httpx
httpx.get(sys.argv[1], params={"wait": 60}, timeout=90,
          headers={"Authorization": "Bearer " + os.environ["GPUFLEET_TOKEN"]})
"""


def test_a_launch_taken_by_a_dead_agents_long_poll_reaches_the_next_poll(api: Api) -> None:
    """An agent SIGKILLed while its long-poll waits: the poll's handler ends with its
    connection (it once stayed behind, woke on the next launch and wrote it into the dead
    connection; and a controller's shutdown waited it out). The next launch reaches the next
    poll (delivery is acknowledged by the poll after), not waiting out a launch deadline."""
    a0 = api.agent("node-0")
    register(a0, "node-0")
    svc = api.app.state.service
    token = api.token("agent", node="node-0")
    poll = subprocess.Popen(
        [sys.executable, "-c", POLL, f"{api.url}/api/v1/agent/node-0/commands"],
        env={**os.environ, "GPUFLEET_TOKEN": token},
    )
    try:
        wait_for("the other poll waiting", lambda: svc.outbox.waiting("node-0") == 1)
        poll.kill()
        poll.wait(timeout=10)
        wait_for("the dead poll's handler gone", lambda: svc.outbox.waiting("node-0") == 0)
        (job,) = api.user("alice").submit(SPEC)
        (cmd,) = a0.commands("node-0", wait_s=5)
        assert (cmd.kind, cmd.job, cmd.attempt) == ("launch", job, 1)
        assert a0.commands("node-0", wait_s=0) == []  # acknowledged: not delivered again
    finally:
        if poll.poll() is None:
            poll.kill()
            poll.wait(timeout=10)


def test_403_an_agent_reports_only_for_its_own_node(api: Api) -> None:
    agent0 = api.agent("node-0")
    register(agent0, "node-0")
    msg = refused(403, lambda: register(agent0, "node-1"))
    assert "this agent token is for node node-0, not node-1" in msg
    hb = s.Heartbeat()
    refused(403, lambda: agent0.heartbeat("node-1", hb))
    refused(403, lambda: agent0.commands("node-1", wait_s=0))
    ev = s.AgentEvent(kind="exited", job="1", attempt=1, rank=0, exit_code=0)
    refused(403, lambda: agent0.events("node-1", [ev]))
    chunk = s.LogChunk(job="1", attempt=1, rank=0, stream="stdout", offset=0, data="x")
    refused(403, lambda: agent0.logs("node-1", chunk))
    assert agent0.heartbeat("node-0", hb).stale == []
    assert [n.name for n in api.admin.nodes()] == ["node-0"]

    # a job on node-1: node-0's agent may not ship its logs, even under its own name
    agent1 = api.agent("node-1")
    register(agent1, "node-1")
    api.admin.drain("node-0")
    (job,) = api.user("alice").submit(SPEC)
    (cmd,) = agent1.commands("node-1", wait_s=5)
    assert cmd.kind == "launch" and cmd.job == job
    chunk = s.LogChunk(job=job, attempt=cmd.attempt, rank=0, stream="stdout", offset=0, data="x")
    msg = refused(403, lambda: agent0.logs("node-0", chunk))
    assert f"node node-0 did not run rank 0 of job {job} (attempt 1)" in msg

    # the job moves to node-0 (node-1 fenced its task): node-1 may still ship attempt 1's
    # log, its tail explains the move; attempt 2's belongs to node-0 alone
    api.admin.resume("node-0")
    api.admin.drain("node-1")
    started(agent1, "node-1", [cmd])
    fenced = s.AgentEvent(
        kind="exited", job=job, attempt=1, rank=0, exit_code=143, why="lease", cause="fenced"
    )
    agent1.events("node-1", [fenced])
    (again,) = wait_for("attempt 2", lambda: agent0.commands("node-0", wait_s=0.2))
    assert again.attempt == 2
    agent1.logs("node-1", chunk)  # attempt 1, from the node that ran it
    later = chunk.model_copy(update={"attempt": 2})
    agent0.logs("node-0", later)
    assert "did not run rank 0" in refused(403, lambda: agent0.logs("node-0", chunk))
    assert "(attempt 2)" in refused(403, lambda: agent1.logs("node-1", later))

    # other roles on agent endpoints, and agents on user endpoints
    alice = api.user("alice")
    r = api.raw(alice.http.headers["authorization"].split()[1]).post(
        "/agent/node-0/heartbeat", json={}
    )
    assert r.status_code == 403 and "a user token may not do this" in r.json()["detail"]
    r = api.raw(agent0.http.headers["authorization"].split()[1]).get("/jobs")
    assert r.status_code == 403 and "an agent token may not do this" in r.json()["detail"]


# ----- 422 and nothing stored ---------------------------------------------------------------

BAD: list[tuple[str, dict[str, Any], str]] = [
    ("unknown spec key", {"spec": {**SPEC, "wrokers": 2}}, "spec.wrokers"),
    ("negative workers", {"spec": {**SPEC, "workers": -2}}, "spec.workers"),
    ("zero workers", {"spec": {**SPEC, "workers": 0}}, "spec.workers"),
    ("workers not a number", {"spec": {**SPEC, "workers": "two"}}, "spec.workers"),
    ("no name", {"spec": {"gpus_per_worker": 1}}, "spec.name"),
    ("bad array", {"spec": SPEC, "array": "1-x"}, "array"),
    ("empty array range", {"spec": SPEC, "array": "9-3"}, "array"),
    ("zero array throttle", {"spec": SPEC, "array": "0-9%0"}, "array"),
    ("bad array throttle", {"spec": SPEC, "array": "0-9%x"}, "array"),
    ("bad topology level", {"spec": {**SPEC, "topology": "rack"}}, "spec.topology"),
    (
        "unknown topology key",
        {"spec": {**SPEC, "topology": {"level": "leaf", "strict": True}}},
        "spec.topology.strict",
    ),
    ("gpu share above one", {"spec": {**SPEC, "gpu_milli": 1500}}, "spec.gpu_milli"),
    ("unknown GPU model", {"spec": {**SPEC, "gpu_models": ["H9000"]}}, "spec.gpu_models"),
    ("negative time limit", {"spec": {**SPEC, "time_limit_s": -1}}, "spec.time_limit_s"),
    ("unknown envelope key", {"spec": SPEC, "priority": 3}, "priority"),
    ("spec not a mapping", {"spec": ["echo"]}, "spec"),
    (
        "bad dependency type",
        {"spec": SPEC, "depends_on": [{"type": "after", "job": "1"}]},
        "depends_on",
    ),
    (
        "unknown dependency",
        {"spec": SPEC, "depends_on": [{"type": "afterok", "job": "999"}]},
        "depends_on[0].job",
    ),
    ("idempotency key too long", {"spec": SPEC, "idempotency_key": "k" * 129}, "idempotency_key"),
]


@pytest.mark.parametrize(("body", "where"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_422_names_the_field_and_stores_nothing(api: Api, body: dict[str, Any], where: str) -> None:
    alice = api.user("alice")
    kept = alice.submit(SPEC)
    before_api = [j.model_dump() for j in api.admin.jobs(all_states=True)]
    before_store, before_audit = api.stored_ids(), len(api.store.audit_log(limit=None))

    r = api.raw(alice.http.headers["authorization"].split()[1]).post("/jobs", json=body)
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    if isinstance(detail, list):  # the envelope's own validation (pydantic)
        locs = {".".join(str(x) for x in d["loc"] if x != "body") for d in detail}
        assert any(loc == where or loc.startswith(where + ".") for loc in locs), detail
    else:
        assert re.search(rf"\b{re.escape(where)}(\.\w+)*: ", detail), detail

    assert [j.model_dump() for j in api.admin.jobs(all_states=True)] == before_api
    assert api.stored_ids() == before_store == kept
    assert len(api.store.audit_log(limit=None)) == before_audit  # no submit was audited
    assert alice.submit(SPEC) == [str(int(kept[0]) + 1)]  # no id was used up


def test_422_unknown_queue_when_queues_are_configured(api: Api) -> None:
    alice = api.user("alice")
    assert alice.submit(SPEC)  # no queues configured: the one queue, default
    n = len(api.stored_ids())
    api.admin.update_queue("vision", s.QueueUpdate(weight=2))
    msg = refused(422, lambda: alice.submit({**SPEC, "queue": "nlp"}))
    assert "spec.queue: invalid partition specified: nlp" in msg and "default, vision" in msg
    assert len(api.stored_ids()) == n
    (job,) = alice.submit({**SPEC, "queue": "vision"})
    assert alice.job(job).queue == "vision"
    # a partition list (sbatch -p a,b): every name it lists is checked, all problems at once
    msg = refused(422, lambda: alice.submit({**SPEC, "queues": "nlp,vision,x"}))
    assert (
        "spec.queues[0]: invalid partition specified: nlp" in msg
        and "spec.queues[2]: invalid partition specified: x" in msg
    )
    assert len(api.stored_ids()) == n + 1
    (job,) = alice.submit({**SPEC, "queues": ["vision", "default"]})
    assert alice.job(job).spec["queues"] == ["vision", "default"]


# ----- idempotency, arrays, dependencies ----------------------------------------------------


def test_an_idempotency_key_gives_back_the_same_job(api: Api) -> None:
    alice = api.user("alice")
    first = alice.submit(SPEC, idempotency_key="k-1")
    again = alice.submit(SPEC, idempotency_key="k-1")
    other = alice.submit(SPEC, idempotency_key="k-2")
    assert first == again and other != first
    assert api.stored_ids() == sorted(first + other, key=int)
    # the same key for a different submission is a conflict, not a silent reuse
    msg = refused(409, lambda: alice.submit({**SPEC, "name": "other"}, idempotency_key="k-1"))
    assert "idempotency key 'k-1' was used for job" in msg
    # arrays: each task keeps its own key
    arr = alice.submit(SPEC, array="0-2", idempotency_key="arr")
    assert alice.submit(SPEC, array="0-2", idempotency_key="arr") == arr
    assert len(api.stored_ids()) == 2 + 3
    submits = [a for a in api.store.audit_log(limit=None) if a.action == "job.submit"]
    assert len(submits) == 5  # each accepted request is audited, retries included


def test_submit_with_a_warning_signal_launches_with_it(api: Api) -> None:
    agent = api.agent("node-0")
    register(agent, "node-0", gpus=8)
    alice = api.user("alice")
    (jid,) = alice.submit({**SPEC, "time_limit_s": 600, "signal": "B:USR1@90", "requeue": False})
    job = alice.job(jid)
    assert job.spec["signal"] == {"signal": 10, "before_s": 90, "batch_only": True}
    assert job.spec["requeue"] is False
    (cmd,) = agent.commands("node-0", wait_s=5)
    assert (cmd.signal, cmd.signal_before_s, cmd.signal_batch_only) == (10, 90, True)
    assert cmd.time_limit_s == 600
    (plain,) = alice.submit(SPEC)
    assert alice.job(plain).spec["signal"] is None and alice.job(plain).spec["requeue"] is True
    started(agent, "node-0", [cmd])
    (cmd2,) = agent.commands("node-0", wait_s=5)
    assert (cmd2.job, cmd2.signal, cmd2.signal_before_s) == (plain, 0, 0.0)


def test_array_submit(api: Api) -> None:
    alice = api.user("alice")
    ids = alice.submit({**SPEC, "name": "sweep"}, array="0-6:3,10")
    assert len(ids) == 4
    jobs = [alice.job(i) for i in ids]
    assert [j.name for j in jobs] == ["sweep_0", "sweep_3", "sweep_6", "sweep_10"]
    assert [dict(j.spec["env"])["SLURM_ARRAY_TASK_ID"] for j in jobs] == ["0", "3", "6", "10"]
    rows = [api.store.job(i) for i in ids]
    assert [(r.array_id, r.array_index) for r in rows if r] == [
        (ids[0], 0),
        (ids[0], 3),
        (ids[0], 6),
        (ids[0], 10),
    ]


def test_cancel_of_an_arrays_id_ends_every_task_and_id_n_one_as_scancel(
    api: Api, tmp_path: Path
) -> None:
    """Seen by a new user: only an array's first task was cancelled by its id."""
    from typer.testing import CliRunner

    from gpufleet.cli.main import app

    alice = api.user("alice")
    ids = alice.submit({**SPEC, "name": "sweep"}, array="0-4")
    assert [alice.job(i).array_index for i in ids] == [0, 1, 2, 3, 4]
    assert {alice.job(i).array_id for i in ids} == {ids[0]}
    tok = tmp_path / "alice.token"
    tok.write_text(alice.http.headers["authorization"].split()[1])
    tok.chmod(0o600)

    def scancel(*args: str) -> str:
        r = CliRunner().invoke(
            app, ["cancel", *args, "--server", api.url, "--token-file", str(tok)]
        )
        assert r.exit_code == 0, r.output
        return r.stdout

    assert scancel(f"{ids[0]}_3") == f"job {ids[3]}: CANCELLED\n"
    assert [alice.job(i).state for i in ids] == ["PENDING"] * 3 + ["CANCELLED", "PENDING"]
    scancel(ids[0])
    assert [alice.job(i).state for i in ids] == ["CANCELLED"] * 5
    # the array's first task has ended already: its id still means the rest of the array
    more = alice.submit({**SPEC, "name": "more"}, array="0-2")
    alice.cancel(more[0])
    out = scancel(more[0])
    assert "has already ended" not in out
    assert [alice.job(i).state for i in more] == ["CANCELLED"] * 3


def test_an_array_throttle_runs_at_most_its_limit(api: Api) -> None:
    agent = api.agent("node-0")
    register(agent, "node-0", gpus=8)
    alice = api.user("alice")
    ids = alice.submit({**SPEC, "name": "sweep"}, array="0-4%2")
    cmds = launches(agent, "node-0", set(ids[:2]))
    assert sorted(c.job for c in cmds) == ids[:2]  # 8 GPUs free, two tasks at once
    assert [r.array_limit for r in (api.store.job(i) for i in ids) if r] == [2] * 5
    waiting = alice.job(ids[2])
    assert waiting.reason is not None and waiting.reason.code == "ArrayTaskLimit"
    started(agent, "node-0", cmds)
    agent.events("node-0", [s.AgentEvent(kind="exited", job=ids[0], attempt=1, rank=0)])
    cmds = agent.commands("node-0", wait_s=5)
    assert [c.job for c in cmds] == [ids[2]]


def test_dependencies_afterok_and_afterany(api: Api) -> None:
    agent = api.agent("node-0")
    register(agent, "node-0", gpus=8)
    alice = api.user("alice")
    (a,) = alice.submit({**SPEC, "name": "a"})
    (ok_a,) = alice.submit({**SPEC, "name": "ok-a"}, depends_on=[("afterok", a)])
    (any_a,) = alice.submit({**SPEC, "name": "any-a"}, depends_on=[("afterany", a)])
    (b,) = alice.submit({**SPEC, "name": "b"})
    (ok_b,) = alice.submit({**SPEC, "name": "ok-b"}, depends_on=[("afterok", b)])

    launched: dict[str, s.AgentCommand] = {}

    def take() -> set[str]:
        for c in agent.commands("node-0", wait_s=0.2):
            if c.kind == "launch":
                launched[c.job] = c
                agent.events("node-0", [s.AgentEvent(kind="started", job=c.job, attempt=1, rank=0)])
        return set(launched)

    assert wait_for("a and b launched", lambda: take() >= {a, b})
    assert set(launched) == {a, b}  # the dependants wait
    for dep in (ok_a, any_a, ok_b):
        j = alice.job(dep)
        assert j.state == "PENDING" and j.reason is not None, j
    agent.events(
        "node-0",
        [
            s.AgentEvent(kind="exited", job=a, attempt=1, rank=0, exit_code=3),
            s.AgentEvent(kind="exited", job=b, attempt=1, rank=0, exit_code=0),
        ],
    )
    assert wait_for("any-a and ok-b launched", lambda: take() >= {any_a, ok_b})
    assert alice.job(a).state == "FAILED" and alice.job(b).state == "SUCCEEDED"
    # ok-a's dependency can never be met: it waits so (Slurm's default, ADR 0072), never
    # started, with no estimated start, until its user cancels it
    never = "DependencyNeverSatisfied"
    j = wait_for("ok-a never", lambda: (j := alice.job(ok_a)).reason.code == never and j)
    assert j.state == "PENDING" and j.reason is not None
    assert j.reason.message == f"dependency afterok:{a} ended FAILED: it can never be met"
    assert j.reason.estimated_start is None
    # a dependency on a job that ended badly, submitted afterwards: accepted, and waits so
    (late,) = alice.submit(SPEC, depends_on=[("afterok", a)])
    assert wait_for("late never", lambda: (r := alice.job(late).reason) and r.code == never)
    alice.cancel(ok_a)
    j = wait_for("ok-a cancelled", lambda: (j := alice.job(ok_a)).state == "CANCELLED" and j)
    assert j.ended is not None and j.ended.reason == never  # as Slurm's Reason= after it
    assert ok_a not in launched and late not in take()


def test_job_events_carry_their_attempt(api: Api) -> None:
    agent = api.agent("node-0")
    register(agent, "node-0")
    (job,) = api.user("alice").submit({**SPEC, "max_retries": 1})
    (cmd,) = agent.commands("node-0", wait_s=5)
    agent.events(
        "node-0",
        [
            s.AgentEvent(kind="started", job=job, attempt=cmd.attempt, rank=0),
            s.AgentEvent(kind="exited", job=job, attempt=cmd.attempt, rank=0, exit_code=1),
        ],
    )
    j = wait_for("back to PENDING", lambda: (j := api.admin.job(job)).state == "PENDING" and j)
    assert j.retries_used == 1
    got = [(e.attempt, e.state) for e in j.events or []]
    assert got == [
        (0, "PENDING"),
        (1, "STARTING"),
        (1, "RUNNING"),
        (1, "FAILED"),
        (1, "PENDING"),
    ]


def test_a_failed_job_with_no_retry_left_has_ended_for_listings(api: Api) -> None:
    """Seen by a new user: a FAILED job stayed in the default (active) listing for ever."""
    agent = api.agent("node-0")
    register(agent, "node-0")
    alice = api.user("alice")
    (failed,) = alice.submit({**SPEC, "name": "fails"})
    (retried,) = alice.submit({**SPEC, "name": "retries", "max_retries": 1})
    cmds = launches(agent, "node-0", {failed, retried})
    started(agent, "node-0", cmds)
    agent.events(
        "node-0",
        [s.AgentEvent(kind="exited", job=c.job, attempt=1, rank=0, exit_code=1) for c in cmds],
    )
    wait_for("the retry waits", lambda: alice.job(retried).state == "PENDING")
    assert alice.job(failed).state == "FAILED"
    assert [j.id for j in alice.jobs()] == [retried]  # the one still to run again
    assert [j.id for j in alice.jobs(all_states=True)] == [retried, failed]
    assert [j.id for j in alice.jobs(state="failed")] == [failed]


def test_accounting_bills_running_jobs_up_to_now_never_to_a_future_until(api: Api) -> None:
    """Seen by a new user: `accounting -E` a year ahead billed 1.1 GPU-h as 13,759.8."""
    agent = api.agent("node-0")
    register(agent, "node-0")
    alice = api.user("alice")
    (job,) = alice.submit({**SPEC, "gpus_per_worker": 2})
    started(agent, "node-0", agent.commands("node-0", wait_s=5))
    api.clock.advance(1800.0)  # half an hour on 2 GPUs, still running: 1 GPU-hour so far
    for until in (None, T0 + 1800.0, T0 + 365 * 86400.0):
        (row,) = alice.accounting(since=T0 - 3600.0, until=until)
        assert row.gpu_hours == pytest.approx(1.0), until
    assert alice.accounting(since=T0 + 86400.0, until=T0 + 2 * 86400.0) == []  # ahead of now
    assert alice.job(job).state == "RUNNING"
    # fairness against entitlement over the same half hour: one queue wanted GPUs, so no
    # hour had two to compare (the figure is the mean over hours with two or more)
    fair = alice.fairness(since=T0 - 3600.0)
    assert (fair.jain, fair.windows, fair.window_s) == (None, 0, 3600.0)


# ----- audit --------------------------------------------------------------------------------


def test_audit_log_records_who_changed_what(api: Api) -> None:
    agent = api.agent("node-0")
    register(agent, "node-0")
    alice = api.user("alice")
    (job,) = alice.submit(SPEC)
    alice.cancel(job)
    api.admin.drain("node-0", reason="bad fan")
    api.admin.resume("node-0")
    api.admin.update_queue("vision", s.QueueUpdate(quota_gpus=8))
    entries = list(reversed(api.admin.audit(limit=1000)))  # oldest first
    seen = [(e.action, e.target) for e in entries]
    for want in [
        ("token.create", "agent-node-0-1"),
        ("node.register", "node-0"),
        ("token.create", "user-alice-2"),
        ("job.submit", job),
        ("job.cancel", job),
        ("node.drain", "node-0"),
        ("node.resume", "node-0"),
        ("queue.update", "vision"),
    ]:
        assert want in seen, (want, seen)
    by = {(e.action, e.target): e for e in entries}
    assert by[("job.submit", job)].actor == "user:user-alice-2"
    assert by[("job.cancel", job)].actor == "user:user-alice-2"
    assert by[("token.create", "user-alice-2")].actor == "admin:admin"
    assert by[("token.create", "user-alice-2")].detail == {"role": "user"}
    assert by[("node.drain", "node-0")].detail == {"reason": "bad fan"}
    assert [e.action for e in entries].index("job.submit") < [e.action for e in entries].index(
        "job.cancel"
    )
    # no secret ever reaches the audit log or the token list
    secrets = {alice.http.headers["authorization"].split()[1]}
    assert not any(x in str(e.detail) for e in entries for x in secrets)
    assert all(t.token is None for t in api.admin.tokens())


# ----- a controller restart ------------------------------------------------------------------


def launches(agent: AgentClient, node: str, jobs: set[str]) -> list[s.AgentCommand]:
    """The launches of ``jobs``, gathered over as many polls as it takes: a poll returns what
    is in the outbox then, and acknowledges what the poll before returned, so two launches
    may come one poll apart (waiting for both in one poll is waiting for a poll window)."""
    got: dict[str, s.AgentCommand] = {}

    def take() -> bool:
        for c in agent.commands(node, wait_s=0.2):
            if c.kind == "launch":
                got[c.job] = c
        return set(got) >= jobs

    wait_for(f"launches of {sorted(jobs)}", take)
    return list(got.values())


def started(agent: AgentClient, node: str, cmds: list[s.AgentCommand]) -> None:
    agent.events(
        node,
        [
            s.AgentEvent(kind="started", job=c.job, attempt=c.attempt, rank=c.rank)
            for c in cmds
            if c.kind == "launch"
        ],
    )


@pytest.mark.both_stores  # through every layer down to the database
def test_a_restarted_controller_reconciles_with_the_agents_before_it_believes_them(
    db_url: str, tmp_path: Path
) -> None:
    """After a restart: finished jobs are still readable; agents must register again, listing
    what they run, before their heartbeats and long-polls count and before anything new is
    placed on their nodes; a launch that never reached its agent is requeued (not charged)
    and never delivered; an admin's drain survives; a task the agent fenced is the node's
    fault, not the job's."""
    clock, data = ManualClock(T0), tmp_path / "controller"
    store = Store.open(db_url)
    try:
        with serve(store, data, clock) as api:
            t0, t1 = api.token("agent", node="node-0"), api.token("agent", node="node-1")
            user = api.token("user", user="alice")
            a0, a1 = AgentClient(api.url, t0), AgentClient(api.url, t1)
            api.clients += [a0, a1]
            register(a0, "node-0")
            register(a1, "node-1")
            api.admin.drain("node-1", reason="bad fan")
            alice = Client(api.url, user)
            api.clients.append(alice)
            (done,) = alice.submit({**SPEC, "name": "done"})
            (run,) = alice.submit({**SPEC, "name": "run"})
            cmds = launches(a0, "node-0", {done, run})
            assert {c.job for c in cmds} == {done, run}
            started(a0, "node-0", cmds)
            a0.events("node-0", [s.AgentEvent(kind="exited", job=done, attempt=1, rank=0)])
            wait_for("done", lambda: alice.job(done).state == "SUCCEEDED")
            assert alice.job(run).state == "RUNNING"
            (lost,) = alice.submit({**SPEC, "name": "never-fetched"})
            assert alice.job(lost).state == "STARTING"  # its launch waits in the outbox

        clock.advance(1)
        with serve(store, data, clock) as api:  # the outbox died with the old process
            a0, a1 = AgentClient(api.url, t0), AgentClient(api.url, t1)
            alice = Client(api.url, user)
            api.clients += [a0, a1, alice]
            j = alice.job(done)  # finished before the restart: read from the store
            assert j.state == "SUCCEEDED" and events(j) == [
                (0, "PENDING"),
                (1, "STARTING"),
                (1, "RUNNING"),
                (1, "SUCCEEDED"),
            ]
            assert refused(409, lambda: alice.cancel(done))
            msg = refused(409, lambda: a0.heartbeat("node-0", s.Heartbeat()))
            assert "register again" in msg
            assert "register first" in refused(409, lambda: a0.commands("node-0", wait_s=0))
            nodes = {n.name: n for n in api.admin.nodes()}
            assert nodes["node-0"].state == "unhealthy" and "waiting for its agent" in (
                nodes["node-0"].why
            )
            (new,) = alice.submit({**SPEC, "name": "after-restart"})
            assert alice.job(new).state == "PENDING"  # nothing placed on a node not back yet
            # listings, newest first, see the jobs that ended before the restart too
            assert [j.id for j in alice.jobs(all_states=True)] == [new, lost, run, done]
            assert [j.id for j in alice.jobs()] == [new, lost, run]
            assert [j.id for j in alice.jobs(state="succeeded")] == [done]
            assert [j.id for j in alice.jobs(all_states=True, limit=2)] == [new, lost]
            assert [j.id for j in alice.jobs(all_states=True, queue="nowhere")] == []
            assert "state: unknown state 'done'" in refused(422, lambda: alice.jobs(state="done"))

            a0.register(
                s.AgentRegister(
                    node="node-0",
                    address="127.0.0.1",
                    gpu_model="H100-SXM",
                    gpus=[
                        s.GpuInfo(index=i, uuid=f"GPU-node-0-{i}", model="H100-SXM", memory_mib=1)
                        for i in range(8)
                    ],
                    cpu_cores=64,
                    memory_gib=256,
                    running=[s.TaskRef(job=run, attempt=1, rank=0)],
                )
            )
            register(a1, "node-1")
            assert a0.heartbeat("node-0", s.Heartbeat()).stale == []
            assert alice.job(run).state == "RUNNING" and alice.job(run).attempt == 1
            j = alice.job(lost)
            assert events(j)[-3:] == [(1, "NODE_LOST"), (1, "PENDING"), (2, "STARTING")]
            assert j.retries_used == 0
            cmds = launches(a0, "node-0", {lost, new})
            assert sorted((c.job, c.attempt) for c in cmds) == sorted([(lost, 2), (new, 1)])
            assert {n.name: n.state for n in api.admin.nodes()}["node-1"] == "drained"
            assert a1.commands("node-1", wait_s=0) == []

            # the agent fences a task (its lease ran out): requeued, not the job's failure
            a0.events(
                "node-0",
                [
                    s.AgentEvent(
                        kind="exited",
                        job=run,
                        attempt=1,
                        rank=0,
                        exit_code=143,
                        why="fenced: no contact with the controller for 9.0 s (lease "
                        "expired); killed by SIGTERM",
                        cause="fenced",  # typed: the why is for people
                    )
                ],
            )
            j = wait_for("requeued", lambda: (j := alice.job(run)).attempt == 2 and j)
            assert j.state == "STARTING" and j.retries_used == 0
            assert events(j)[-3:] == [(1, "NODE_LOST"), (1, "PENDING"), (2, "STARTING")]
    finally:
        store.close()


@pytest.mark.both_stores  # through every layer down to the database
def test_fair_share_usage_survives_a_restart_decayed_over_the_downtime(
    db_url: str, tmp_path: Path
) -> None:
    clock, data = ManualClock(T0), tmp_path / "controller"
    store = Store.open(db_url)
    try:
        with serve(store, data, clock) as api:
            agent = api.agent("node-0")
            register(agent, "node-0")
            alice = api.user("alice")
            api.admin.update_queue("vision", s.QueueUpdate(weight=1))  # only admins make queues
            (job,) = alice.submit({**SPEC, "gpus_per_worker": 8, "queue": "vision"})
            cmds = agent.commands("node-0", wait_s=5)
            started(agent, "node-0", cmds)
            wait_for("running", lambda: alice.job(job).state == "RUNNING")
            clock.advance(3600)  # the whole node for an hour
            agent.events("node-0", [s.AgentEvent(kind="exited", job=job, attempt=1, rank=0)])
            wait_for("done", lambda: alice.job(job).state == "SUCCEEDED")
            before = {q.name: q.fair_share_usage for q in api.admin.queues()}
            assert before["vision"] == pytest.approx(3600, rel=0.01)  # share 1 for ~3600 s

        half_life = 7 * 86400.0  # the fairshare plugin's default (Slurm's)
        clock.advance(half_life)
        with serve(store, data, clock) as api:
            after = {q.name: q.fair_share_usage for q in api.admin.queues()}
            assert after["vision"] == pytest.approx(before["vision"] / 2, rel=1e-6)
    finally:
        store.close()


@pytest.mark.both_stores  # through every layer down to the database
def test_an_idempotent_retry_after_a_restart_does_not_run_a_finished_job_again(
    db_url: str, tmp_path: Path
) -> None:
    clock, data = ManualClock(T0), tmp_path / "controller"
    store = Store.open(db_url)
    try:
        with serve(store, data, clock) as api:
            agent_token, user = api.token("agent", node="node-0"), api.token("user", user="alice")
            agent, alice = AgentClient(api.url, agent_token), Client(api.url, user)
            api.clients += [agent, alice]
            register(agent, "node-0")
            (job,) = alice.submit(SPEC, idempotency_key="nightly-1")
            (cmd,) = agent.commands("node-0", wait_s=5)
            started(agent, "node-0", [cmd])
            agent.events("node-0", [s.AgentEvent(kind="exited", job=job, attempt=1, rank=0)])
            wait_for("done", lambda: alice.job(job).state == "SUCCEEDED")
        with serve(store, data, clock) as api:
            agent, alice = AgentClient(api.url, agent_token), Client(api.url, user)
            api.clients += [agent, alice]
            register(agent, "node-0")
            assert alice.submit(SPEC, idempotency_key="nightly-1") == [job]
            (fresh,) = alice.submit(SPEC, idempotency_key="nightly-2")
            cmds = agent.commands("node-0", wait_s=5)
            assert [(c.job, c.attempt) for c in cmds] == [(fresh, 1)]  # not job's attempt 1
            j = alice.job(job)
            assert j.state == "SUCCEEDED" and j.attempt == 1
            assert [e.state for e in j.events or []].count("STARTING") == 1
            assert [x.id for x in alice.jobs(all_states=True)].count(job) <= 1
            # a job that ended before the restart is still a dependency one can name
            (after,) = alice.submit(SPEC, depends_on=[("afterok", job)])
            (cmd,) = agent.commands("node-0", wait_s=5)
            assert (cmd.job, cmd.attempt) == (after, 1)
    finally:
        store.close()
