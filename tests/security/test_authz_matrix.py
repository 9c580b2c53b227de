"""The authorization matrix: every operation of the live OpenAPI schema × every kind of caller,
each with the status that the policy (DESIGN.md: "a user touches only their own jobs; an agent
speaks only for its own node"; admins manage the cluster) gives it.

A real controller (uvicorn on 127.0.0.1, real SQLite, the service loop running); path
parameters are real objects: alice's job running on node-1, bob's job, node-1 and node-2 with
their agents registered. The table below is written from the policy, not recorded from the
server; an operation the schema gains without a line here fails the test."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpufleet.api import schemas as s
from gpufleet.api.secrets import SecretCreate
from gpufleet.base.clock import ManualClock
from gpufleet.client import Client
from gpufleet.client.http import AgentClient
from gpufleet.client.httpx_transport import trusts_no_one
from gpufleet.server.app import create_app
from gpufleet.server.config import ServerConfig
from gpufleet.server.ratelimit import FailedAuthLimiter
from gpufleet.server.store import Store
from support import ports
from support.serving import serve_app

CALLERS = ("none", "bad", "alice", "bob", "admin", "agent-1", "agent-2", "metrics")
SPEC: dict[str, Any] = {"name": "m", "gpus_per_worker": 1, "command": ["sleep", "1"]}
# a job that waits as long as alice's job holds a GPU of node-1 (it runs throughout): both
# 8-GPU nodes whole (one that no node could ever hold is refused at submit)
WAITS: dict[str, Any] = {"workers": 2, "gpus_per_worker": 8}
SERVICE: dict[str, Any] = {"replicas": 1, "replica": {"gpus_per_worker": 16, "command": ["x"]}}


# Who may call what. ``ok``: the success status; everyone not allowed gets 403 (a token of a
# role that may not do it, or of another user or node), 401 with no or a bad token.
@dataclass(frozen=True)
class Rule:
    ok: int
    allowed: frozenset[str]
    public: bool = False  # no token needed at all

    def expected(self, caller: str) -> int:
        if self.public or caller in self.allowed:
            return self.ok
        return 401 if caller in ("none", "bad") else 403


def rule(ok: int, *allowed: str) -> Rule:
    return Rule(ok, frozenset(allowed))


PUBLIC = Rule(200, frozenset(), public=True)
OWNER = ("alice", "admin")  # the path's job is alice's
USERS = ("alice", "bob", "admin")
ADMIN = ("admin",)
# An agent calls for its own node (the path's {node} is the caller's), and the body speaks of
# alice's rank, which runs on node-1: only node-1's agent may; node-2's speaks of another node.
NODE_1 = ("agent-1",)
AGENTS = ("agent-1", "agent-2")  # nothing in the call is about another node

POLICY: dict[tuple[str, str], Rule] = {
    ("POST", "/api/v1/jobs"): rule(201, *USERS),
    ("POST", "/api/v1/sbatch"): rule(201, *USERS),  # sbatch's command line, as POST /jobs
    ("POST", "/api/v1/sbatch/test"): rule(200, *USERS),  # sbatch --test-only: nothing stored
    ("GET", "/api/v1/jobs"): rule(200, *USERS),  # each user sees their own
    ("POST", "/api/v1/squeue"): rule(200, *USERS),  # squeue's table: each user sees their own
    ("POST", "/api/v1/jobs/table"): rule(200, *USERS),  # gpufleet jobs' table: the same
    ("GET", "/api/v1/jobs/{job_id}"): rule(200, *OWNER),
    ("POST", "/api/v1/jobs/{job_id}/cancel"): rule(200, *OWNER),
    ("POST", "/api/v1/jobs/{job_id}/hold"): rule(200, *OWNER),  # scontrol hold|uhold|release
    ("PATCH", "/api/v1/jobs/{job_id}"): rule(200, *OWNER),  # scontrol update JobId=
    # scontrol requeue of a fresh job of alice's that waits: past the authz, 409 (pending);
    # a running one's 200: tests/integration/test_update_api.py
    ("POST", "/api/v1/jobs/{job_id}/requeue"): rule(409, *OWNER),
    # scancel --signal of alice's job that waits: past the authz, 409 (not started); a running
    # one's 200: tests/integration/test_signal_api.py
    ("POST", "/api/v1/jobs/{job_id}/signal"): rule(409, *OWNER),
    ("GET", "/api/v1/jobs/{job_id}/logs"): rule(200, *OWNER),
    ("GET", "/api/v1/nodes"): rule(200, *USERS),
    ("POST", "/api/v1/nodes/{name}/drain"): rule(200, *ADMIN),
    ("POST", "/api/v1/nodes/{name}/resume"): rule(200, *ADMIN),
    ("GET", "/api/v1/nodes/{name}/history"): rule(200, *USERS),
    ("GET", "/api/v1/queues"): rule(200, *USERS),
    ("PUT", "/api/v1/queues/{name}"): rule(200, *ADMIN),
    ("GET", "/api/v1/tokens"): rule(200, *ADMIN),
    ("POST", "/api/v1/tokens"): rule(201, *ADMIN),
    ("DELETE", "/api/v1/tokens/{name}"): rule(204, *ADMIN),
    ("GET", "/api/v1/audit"): rule(200, *ADMIN),
    # a secret of alice's (the body's or query's user): hers and an admin's to make and remove;
    # queue and cluster secrets are an admin's (tests/integration/test_secrets_api.py)
    ("POST", "/api/v1/secrets"): rule(201, *OWNER),
    ("GET", "/api/v1/secrets"): rule(200, *USERS),  # a user sees no other user's
    ("DELETE", "/api/v1/secrets/{name}"): rule(204, *OWNER),
    # a service of alice's (never placed: its replicas need 16 GPUs): hers and an admin's
    ("POST", "/api/v1/services"): rule(201, *USERS),  # each user runs their own
    ("GET", "/api/v1/services"): rule(200, *USERS),  # a user sees no other user's
    ("GET", "/api/v1/services/{name}"): rule(200, *OWNER),
    ("PUT", "/api/v1/services/{name}"): rule(200, *OWNER),
    ("PATCH", "/api/v1/services/{name}"): rule(200, *OWNER),
    ("POST", "/api/v1/services/{name}/scale"): rule(200, *OWNER),
    ("POST", "/api/v1/services/{name}/token"): rule(200, *OWNER),  # a new endpoint token
    ("DELETE", "/api/v1/services/{name}"): rule(204, *OWNER),
    # reservations (maintenance windows): admins make and remove them, users may see them
    ("POST", "/api/v1/reservations"): rule(201, *ADMIN),
    ("GET", "/api/v1/reservations"): rule(200, *USERS),
    ("GET", "/api/v1/reservations/{name}"): rule(200, *USERS),
    ("DELETE", "/api/v1/reservations/{name}"): rule(204, *ADMIN),
    ("GET", "/api/v1/accounting"): rule(200, *USERS),  # a user's rows are their own
    ("GET", "/api/v1/accounting/fairness"): rule(200, *USERS),  # per queue, as --by queue
    ("GET", "/api/v1/dashboard/me"): rule(200, *USERS),
    ("GET", "/api/v1/dashboard/cluster"): rule(200, *USERS),
    ("GET", "/api/v1/dashboard/alerts"): rule(200, *USERS),
    ("POST", "/api/v1/agent/register"): rule(200, *NODE_1),  # alice's rank said to run
    ("POST", "/api/v1/agent/{node}/heartbeat"): rule(200, *NODE_1),  # alice's rank said to run
    ("GET", "/api/v1/agent/{node}/commands"): rule(200, *AGENTS),
    ("POST", "/api/v1/agent/{node}/events"): rule(204, *NODE_1),
    ("POST", "/api/v1/agent/{node}/logs"): rule(204, *NODE_1),
    # Prometheus's token (role metrics) reads /metrics and nothing else; an admin's may
    # (a controller run with --metrics-public serves it to anyone: test_health.py)
    # rolling maintenance and operators' node commands: admins only (ADR 0041)
    ("POST", "/api/v1/maintenance"): rule(201, *ADMIN),
    ("GET", "/api/v1/maintenance"): rule(200, *ADMIN),
    ("GET", "/api/v1/maintenance/{mid}"): rule(200, *ADMIN),
    # a rollout waiting for its window awaits no confirmation: an admin is told so (409)
    ("POST", "/api/v1/maintenance/{mid}/confirm"): rule(409, *ADMIN),
    ("POST", "/api/v1/maintenance/{mid}/cancel"): rule(200, *ADMIN),
    ("POST", "/api/v1/nodes/{name}/commands"): rule(201, *ADMIN),
    ("GET", "/api/v1/nodes/{name}/commands"): rule(200, *ADMIN),
    ("GET", "/api/v1/node-commands/{cid}"): rule(200, *ADMIN),
    ("GET", "/api/v1/accounts/{user}"): rule(200, *ADMIN),  # each node's answer about a user
    # an agent answers for its own node: node-2's report of node-1's command changes nothing
    ("POST", "/api/v1/agent/{node}/accounts"): rule(204, *AGENTS),
    ("POST", "/api/v1/agent/{node}/command-results"): rule(204, *AGENTS),
    # a remote gateway's sync (ADR on HA gateways): an admin's; this controller runs its own
    # proxy, so an admin is told so (409), anyone else is refused first
    ("POST", "/api/v1/gateway/sync"): rule(409, *ADMIN),
    ("GET", "/metrics"): rule(200, "metrics", "admin"),
    ("GET", "/healthz"): PUBLIC,
}


@dataclass
class World:
    url: str
    app: Any
    clock: ManualClock
    tokens: dict[str, str | None]
    admin: Client
    alice_job: str
    bob_job: str
    # the matrix's raw calls (each with its own headers, or none): one client, not one per
    # call (an httpx.Client loads the trusted CAs when made: ~24 ms of CPU, ~1,500 calls)
    http: httpx.Client = field(default_factory=lambda: httpx.Client(verify=trusts_no_one()))
    _n: Iterator[int] = field(default_factory=itertools.count)

    def fresh(self) -> int:
        return next(self._n)

    def attempt(self, job: str) -> int:
        return self.admin.job(job).attempt


def _gpus(node: str) -> list[s.GpuInfo]:
    return [
        s.GpuInfo(index=i, uuid=f"GPU-{node}-{i}", model="H100-SXM", memory_mib=81559)
        for i in range(8)
    ]


def _alices(w: World) -> s.TaskRef:
    return s.TaskRef(job=w.alice_job, attempt=w.attempt(w.alice_job), rank=0)


def _register(node: str, running: list[s.TaskRef] | None = None) -> s.AgentRegister:
    return s.AgentRegister(
        node=node,
        address="127.0.0.1",
        gpu_model="H100-SXM",
        gpus=_gpus(node),
        cpu_cores=64,
        memory_gib=256,
        running=running or [],
    )


def _window(w: World, name: str) -> dict[str, Any]:
    """A maintenance window on node-2 far ahead (it never touches a call), none overlapping."""
    start = w.clock.now() + 10**7 + 1000 * w.fresh()
    return {"name": name, "nodes": "node-2", "start": start, "duration_s": 60}


def _admin_post(w: World, path: str, body: dict[str, Any]) -> dict[str, Any]:
    r = w.admin.http.post(path, json=body)
    assert r.status_code == 201, r.text
    out: dict[str, Any] = r.json()
    return out


def _rollout_body(w: World) -> dict[str, Any]:
    """A rollout on node-2 bound to a window far ahead: it waits, touching nothing (one
    rollout per node at a time: the one before is cancelled)."""
    for r in w.admin.http.get("/api/v1/maintenance").json():
        if r["ended"] is None:
            w.admin.http.post(f"/api/v1/maintenance/{r['id']}/cancel").raise_for_status()
    name = f"roll-{w.fresh()}"
    w.admin.create_reservation(_window(w, name))
    return {"nodes": "node-2", "run": "true", "window": name}


def _rollout(w: World) -> dict[str, Any]:
    return _admin_post(w, "/api/v1/maintenance", _rollout_body(w))


def _node_command(w: World, node: str) -> dict[str, Any]:
    return _admin_post(w, f"/api/v1/nodes/{node}/commands", {"command": "true", "why": "matrix"})


def _call(w: World, method: str, path: str, caller: str) -> tuple[str, dict[str, Any], Any]:
    """The concrete URL, query and body of one call of ``method path`` on real objects; a
    call that changes something changes a fresh object, so every caller meets the same."""
    q: dict[str, Any] = {}
    body: Any = None
    node = "node-2" if caller == "agent-2" else "node-1"
    url = path.replace("{node}", node)
    if "{job_id}" in path:
        job = w.alice_job
        if path.endswith(("/cancel", "/requeue", "/signal")):  # alice's own, each call anew
            (job,) = w.admin.submit({**SPEC, **WAITS, "user": "alice"})
        url = url.replace("{job_id}", job)
    if path == "/api/v1/tokens/{name}":
        name = f"victim-{w.fresh()}"
        w.admin.create_token(s.TokenCreate(name=name, role="user", user="carol"))
        url = url.replace("{name}", name)
    elif path == "/api/v1/secrets/{name}":
        name = f"victim-{w.fresh()}"
        w.admin.create_secret(SecretCreate(name=name, value="v", user="alice"))
        url = url.replace("{name}", name)
        q = {"scope": "user", "user": "alice"}
    elif path == "/api/v1/reservations/{name}":  # a window of its own, removed once only
        name = f"resv-{w.fresh()}"
        w.admin.create_reservation(_window(w, name))
        url = url.replace("{name}", name)
    elif path.startswith("/api/v1/services/{name}"):
        name = f"svc-{w.fresh()}"  # alice's, of its own: changed or removed once only
        w.admin.create_service(
            {**SERVICE, "name": name, "replica": {**SERVICE["replica"], "user": "alice"}}
        )
        url = url.replace("{name}", name)
    elif "{mid}" in path:  # a rollout of its own, waiting for its window: nothing happens
        url = url.replace("{mid}", _rollout(w)["id"])
    elif path == "/api/v1/node-commands/{cid}":
        url = url.replace("{cid}", _node_command(w, "node-2")["id"])
    elif path == "/api/v1/accounts/{user}":
        url = url.replace("{user}", "alice")
    elif path == "/api/v1/queues/{name}":
        url = url.replace("{name}", "default")
    elif "{name}" in path:
        url = url.replace("{name}", "node-2")
    if (method, path) == ("POST", "/api/v1/jobs"):
        body = {"spec": {**SPEC, **WAITS}}  # never placed: nothing changes
    elif (method, path) in (("POST", "/api/v1/sbatch"), ("POST", "/api/v1/sbatch/test")):
        argv = ["-N", "2", "--gres=gpu:8", "--wrap=sleep 1"]  # as WAITS
        body = {"argv": argv, "cwd": "/tmp", "host": "matrix"}
    elif path == "/api/v1/jobs/{job_id}/hold":  # alice's running job: kept for a requeue
        body = {"action": "uhold"}
    elif path == "/api/v1/jobs/{job_id}/signal":
        body = {"signal": "USR1"}
    elif (method, path) == ("PATCH", "/api/v1/jobs/{job_id}"):  # alice's running job renamed
        body = {"name": "renamed"}
    elif (method, path) == ("POST", "/api/v1/squeue"):
        body = {"argv": ["-h", "-o", "%i %u"]}
    elif (method, path) == ("POST", "/api/v1/jobs/table"):
        body = {"all": True}
    elif (method, path) == ("POST", "/api/v1/services"):
        body = {"spec": {**SERVICE, "name": f"new-{w.fresh()}"}}
    elif (method, path) == ("PUT", "/api/v1/services/{name}"):
        body = {"spec": {**SERVICE, "replicas": 2}}
    elif (method, path) == ("PATCH", "/api/v1/services/{name}"):
        body = {"spec": {"replicas": 2}}
    elif path == "/api/v1/services/{name}/scale":
        body = {"replicas": 2}
    elif (method, path) == ("POST", "/api/v1/reservations"):
        body = _window(w, f"new-{w.fresh()}")
    elif (method, path) == ("POST", "/api/v1/secrets"):
        body = {"name": f"new-{w.fresh()}", "value": "v", "user": "alice"}
    elif (method, path) == ("POST", "/api/v1/tokens"):
        body = {"name": f"new-{w.fresh()}", "role": "user", "user": "dave"}
    elif (method, path) == ("POST", "/api/v1/maintenance"):
        body = _rollout_body(w)
    elif (method, path) == ("POST", "/api/v1/nodes/{name}/commands"):
        body = {"command": "true", "why": "matrix"}
    elif path.endswith("/agent/{node}/accounts"):
        body = {"answers": {"alice": None}}
    elif path.endswith("/command-results"):  # node-1's command: only node-1's report counts
        body = {"id": _node_command(w, "node-1")["id"], "exit_code": 0}
    elif path == "/api/v1/gateway/sync":
        body = {}
    elif path.endswith("/drain"):
        body = {"reason": "matrix"}
    elif path.startswith("/api/v1/queues/"):
        body = {"weight": 1.0}
    elif path == "/api/v1/agent/register":  # its node again, running alice's rank
        body = _register(node, [_alices(w)]).model_dump()
    elif path.endswith("/heartbeat"):
        body = s.Heartbeat(running=[_alices(w)]).model_dump()
    elif path == "/api/v1/agent/{node}/commands":
        q = {"wait": 0}
    elif path.endswith("/events"):  # a started event about alice's rank on node-1
        ev = s.AgentEvent(kind="started", job=w.alice_job, attempt=w.attempt(w.alice_job), rank=0)
        body = s.AgentEvents(events=[ev]).model_dump()
    elif path.endswith("/agent/{node}/logs"):
        body = s.LogChunk(
            job=w.alice_job,
            attempt=w.attempt(w.alice_job),
            rank=0,
            stream="stdout",
            offset=0,
            data="",
        ).model_dump()
    return url, q, body


@contextlib.contextmanager
def _serve(tmp: Path) -> Iterator[tuple[str, Any, ManualClock]]:
    clock = ManualClock(1_700_000_000.0)
    store = Store.open(f"sqlite:///{tmp / 'gpufleet.db'}")
    cfg = ServerConfig(
        data_dir=tmp / "controller",
        min_pass_gap_s=0.0,  # the clock stands still
        **ports.gateway_ports(),  # not another xdist worker's endpoints
    )
    app = create_app(cfg, store=store, clock=clock)
    try:
        with serve_app(app) as url:
            yield url, app, clock
    finally:
        store.close()


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("matrix")
    with _serve(tmp) as (url, app, clock):
        admin = Client(url, (tmp / "controller" / "admin.token").read_text().strip())
        tokens: dict[str, str | None] = {"none": None, "bad": "gf_not-a-real-token"}
        for caller, kw in (
            ("alice", {"role": "user", "user": "alice"}),
            ("bob", {"role": "user", "user": "bob"}),
            ("agent-1", {"role": "agent", "node": "node-1"}),
            ("agent-2", {"role": "agent", "node": "node-2"}),
            ("metrics", {"role": "metrics"}),
        ):
            tokens[caller] = admin.create_token(s.TokenCreate(name=caller, **kw)).token
        tokens["admin"] = admin.http.headers["authorization"].split()[1]
        a1, a2 = AgentClient(url, tokens["agent-1"]), AgentClient(url, tokens["agent-2"])
        a1.register(_register("node-1"))
        alice = Client(url, tokens["alice"])
        (alice_job,) = alice.submit(SPEC)  # placed on node-1, the only node yet
        (launch,) = a1.commands("node-1", wait_s=5)
        assert launch.job == alice_job
        a2.register(_register("node-2"))
        (bob_job,) = Client(url, tokens["bob"]).submit({**SPEC, **WAITS})
        w = World(url, app, clock, tokens, admin, alice_job, bob_job)
        try:
            yield w
        finally:
            w.http.close()
            for c in (admin, a1, a2, alice):
                c.close()


def _operations(w: World) -> list[tuple[str, str]]:
    # generous: the schema is built on the first request, seconds on a loaded machine
    schema = w.http.get(w.url + "/api/v1/openapi.json", timeout=120).json()
    return sorted(
        (m.upper(), p)
        for p, ops in schema["paths"].items()
        for m in ops
        if m in ("get", "post", "put", "patch", "delete")
    )


def test_every_operation_has_a_rule(world: World) -> None:
    ops = set(_operations(world))
    assert ops, "the schema lists no operations"
    missing = sorted(ops - POLICY.keys())
    assert not missing, f"operations without an authorization rule: {missing}"
    gone = sorted(POLICY.keys() - ops)
    assert not gone, f"rules for operations the schema no longer has: {gone}"


def _check(w: World, method: str, path: str, caller: str) -> tuple[int, str]:
    # the bad token's caller is limited after a burst (test_api_auth.py covers that): each
    # of its calls starts with a fresh limit, so that here it is the 401 that is checked
    w.app.state.tokens.limiter = FailedAuthLimiter(w.clock.now)
    url, q, body = _call(w, method, path, caller)
    token = w.tokens[caller]
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    r = w.http.request(method, w.url + url, params=q, json=body, headers=headers, timeout=30)
    return r.status_code, r.text[:300]


@pytest.mark.parametrize("caller", CALLERS)
def test_the_matrix(world: World, caller: str) -> None:
    wrong: list[str] = []
    for method, path in _operations(world):
        want = POLICY[(method, path)].expected(caller)
        got, text = _check(world, method, path, caller)
        if got != want:
            wrong.append(f"{method} {path} as {caller}: {got}, expected {want} ({text})")
    assert not wrong, "\n".join(wrong)


def test_an_agent_calls_only_for_its_own_node(world: World) -> None:
    """The path's node another agent's: 403 for every agent endpoint, whatever the body."""
    for method, path in _operations(world):
        if "{node}" not in path:
            continue
        url, q, body = _call(world, method, path, "agent-1")
        h = {"Authorization": f"Bearer {world.tokens['agent-2']}"}
        r = world.http.request(method, world.url + url, params=q, json=body, headers=h, timeout=30)
        assert r.status_code == 403, (method, path, r.text)
        assert "this agent token is for node node-2, not node-1" in r.json()["detail"]


def test_a_user_sees_only_their_own_jobs_in_listings(world: World) -> None:
    """What ``GET /jobs`` answers a user (200 for both) holds only their own jobs."""
    for caller, mine in (("alice", world.alice_job), ("bob", world.bob_job)):
        h = {"Authorization": f"Bearer {world.tokens[caller]}"}
        r = world.http.get(world.url + "/api/v1/jobs", params={"all": "true"}, headers=h)
        users = {j["user"] for j in r.json()}
        assert users == {caller} and mine in {j["id"] for j in r.json()}


def test_a_user_sees_no_other_users_secrets(world: World) -> None:
    """What ``GET /secrets`` answers bob (200) holds none of alice's."""
    world.admin.create_secret(SecretCreate(name=f"hers-{world.fresh()}", value="v", user="alice"))
    h = {"Authorization": f"Bearer {world.tokens['bob']}"}
    r = world.http.get(world.url + "/api/v1/secrets", headers=h)
    assert r.status_code == 200 and not any(x["owner"] == "alice" for x in r.json())
