"""Services over real HTTP on 127.0.0.1 (test_api.py's server with its ManualClock and scripted
agents), on SQLite and PostgreSQL: a service made through the API has its replicas as jobs that
are launched on the agents; it is scaled, updated (a rollout), listed and shown with its
replicas; another user may neither see nor change it; a bad body is refused with every problem
at once; a restarted controller keeps the same replicas; removing it stops them."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import pytest
from test_api import T0, Api, refused, register, serve, started, wait_for

from gpufleet.api import schemas as s
from gpufleet.base.clock import ManualClock
from gpufleet.client import Client
from gpufleet.client.http import AgentClient, over_httpx
from gpufleet.gateway import make_gateway
from gpufleet.ops.gatewayd import Follower, SyncError
from gpufleet.server.store import Store

SVC: dict[str, Any] = {
    "name": "web",
    "replicas": 2,
    "replica": {"gpus_per_worker": 1, "command": ["python", "-m", "http.server"]},
}


def launches(agent: AgentClient, node: str, n: int) -> list[s.AgentCommand]:
    got: list[s.AgentCommand] = []

    def more() -> bool:
        got.extend(c for c in agent.commands(node, wait_s=0.2) if c.kind == "launch")
        return len(got) >= n

    wait_for(f"{n} launches on {node}", more)
    return got


def test_a_service_runs_scales_updates_and_goes(api: Api) -> None:
    alice = api.user("alice")
    a0 = api.agent("node-0")
    register(a0, "node-0")
    out = alice.create_service(SVC)
    assert (out.name, out.user, out.generation, out.desired, out.live) == ("web", "alice", 1, 2, 2)
    assert [r.job_id for r in out.replicas] == ["web.1", "web.2"]
    cmds = launches(a0, "node-0", 2)
    assert sorted(c.job for c in cmds) == ["web.1", "web.2"]
    started(a0, "node-0", cmds)
    web = wait_for("2 ready", lambda: (x := alice.service("web")).ready == 2 and x)
    assert all(r.state == "RUNNING" and r.node == "node-0" and r.port for r in web.replicas)
    assert {r.readiness for r in web.replicas} == {"none"}  # no readiness probe: running is ready
    assert [e.what for e in web.events or []] == ["created"]
    # the replicas are the owner's jobs, listed like any job
    assert {"web.1", "web.2"} <= {j.id for j in alice.jobs()}
    assert alice.job("web.1").state == "RUNNING"

    up = alice.scale_service("web", 3)
    assert up.desired == 3 and [r.job_id for r in up.replicas][-1] == "web.3"
    (third,) = launches(a0, "node-0", 1)
    started(a0, "node-0", [third])

    rolled = alice.update_service("web", {"replica": {"env": {"MODEL": "v2"}}})
    assert rolled.generation == 2 and rolled.rolling_out and rolled.previous_generation == 1
    assert rolled.spec["replica"]["env"] == {"MODEL": "v2"}
    new = [r for r in rolled.replicas if r.generation == 2]
    assert new and all(r.job_id.startswith("web.") for r in new)

    down = alice.scale_service("web", 0)
    assert down.desired == 0
    alice.delete_service("web")
    assert alice.service("web").deleting  # until its running replicas have stopped
    kills: list[s.AgentCommand] = []

    def all_killed() -> bool:
        kills.extend(c for c in a0.commands("node-0", wait_s=0.2) if c.kind == "kill")
        return {c.job for c in kills} >= {"web.1", "web.2", "web.3"}

    wait_for("the running replicas killed", all_killed)
    a0.events(
        "node-0",
        [
            s.AgentEvent(kind="exited", job=c.job, attempt=c.attempt, rank=0, exit_code=143)
            for c in {c.job: c for c in kills}.values()
        ],
    )
    wait_for("gone", lambda: not alice.services())
    assert "no service web" in refused(404, lambda: alice.service("web"))
    assert {j.state for j in alice.jobs(all_states=True)} == {"CANCELLED"}
    assert api.store.service("web") is None
    assert [e.what for e in api.store.service_events("web")][-1] == "removed"
    actions = [e.action for e in api.admin.audit(limit=1000) if e.target == "web"]
    for a in ("service.create", "service.scale", "service.update", "service.delete"):
        assert a in actions, a


def test_another_user_neither_sees_nor_changes_it(api: Api) -> None:
    alice, bob = api.user("alice"), api.user("bob")
    alice.create_service(SVC)
    assert bob.services() == []
    assert [x.name for x in api.admin.services()] == ["web"]
    for call in (
        lambda: bob.service("web"),
        lambda: bob.scale_service("web", 5),
        lambda: bob.update_service("web", {"replicas": 3}),
        lambda: bob.delete_service("web"),
        lambda: bob.rotate_service_token("web"),
    ):
        assert "belongs to alice" in refused(403, call)
    assert "no service nope" in refused(404, lambda: bob.service("nope"))
    assert "runs services as bob" in refused(
        403,
        lambda: bob.create_service(
            {**SVC, "name": "x", "replica": {**SVC["replica"], "user": "alice"}}
        ),
    )
    assert "exists already" in refused(409, lambda: alice.create_service(SVC))
    assert alice.service("web").desired == 2  # nothing of bob's changed it


def _get(url: str, token: str | None) -> int:
    """The status of GET ``url`` through the gateway (an error status too; 0: no answer, as
    before the proxy, which applies on its own thread, listens)."""
    import urllib.error
    import urllib.request

    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return e.code
    except urllib.error.URLError:
        return 0


def test_the_endpoint_token_is_shown_once_and_can_be_renewed(api: Api) -> None:
    alice = api.user("alice")
    a0 = api.agent("node-0")
    register(a0, "node-0")
    made = alice.create_service(SVC)
    e = made.endpoint
    assert e is not None and e.token and e.url == f"http://127.0.0.1:{e.port}"
    assert 31500 <= e.port <= 32499
    shown = alice.service("web").endpoint
    assert shown is not None and (shown.url, shown.token) == (e.url, None)  # never again
    assert [x.endpoint for x in alice.services()] == [shown]
    assert e.token not in json.dumps(api.admin.service("web").model_dump())
    started(a0, "node-0", launches(a0, "node-0", 2))
    wait_for("2 ready", lambda: alice.service("web").ready == 2)
    # ready: the core routes them; routed: the proxy's reload that sends them requests is done
    wait_for("2 routed", lambda: [r.routed for r in alice.service("web").replicas] == [True] * 2)
    # the proxy checks the token (no replica process answers behind it: not 401 is enough)
    wait_for("the token taken", lambda: _get(e.url + "/", e.token) not in (0, 401))
    assert _get(e.url + "/", None) == 401 and _get(e.url + "/", "wrong") == 401

    new = alice.rotate_service_token("web").endpoint
    assert new is not None and new.token and new.token != e.token and new.port == e.port
    assert alice.service("web").endpoint == shown  # the same address, no token shown
    assert _get(e.url + "/", e.token) == 401  # the answer came once the proxy had it
    assert _get(e.url + "/", new.token) != 401
    actions = [x.action for x in api.admin.audit(limit=1000) if x.target == "web"]
    assert "service.token" in actions
    assert "no service nope" in refused(404, lambda: alice.rotate_service_token("nope"))


def test_a_bad_body_gets_every_problem_at_once_and_nothing_is_stored(api: Api) -> None:
    alice = api.user("alice")
    bad = {
        "name": "Web.1",
        "replicas": -1,
        "replica": {"gpus_per_worker": 1, "workers": 2},
        "readiness": {"http": {"path": "ready"}, "tcp": {}},
        "surprise": 1,
    }
    r = api.raw(alice.http.headers["authorization"].split()[1]).post(
        "/services", json={"spec": bad}
    )
    assert r.status_code == 422, r.text
    fields = {e["field"] for e in r.json()["errors"]}
    for f in (
        "body.spec.name",
        "body.spec.replicas",
        "body.spec.replica.workers",
        "body.spec.replica.command",
        "body.spec.readiness",
        "body.spec.surprise",
    ):
        assert f in fields, (f, fields)
    long = {**SVC, "name": "a" * 30}
    assert "at most 24 characters" in refused(422, lambda: alice.create_service(long))
    raw = api.raw(alice.http.headers["authorization"].split()[1])
    for content in (
        json.dumps({"spec": {**SVC, "name": "nul\x00"}}),
        '{"spec": {"name": "w", "replicas": NaN, "replica": {"command": ["x"]}}}',
        json.dumps({"spec": {**SVC, "name": "x" * 100_000}}),
    ):
        got = raw.post("/services", content=content, headers={"content-type": "application/json"})
        assert got.status_code == 422, got.text
    assert raw.post("/services/web/scale", json={"replicas": -1}).status_code == 422
    assert api.store.services() == [] and api.stored_ids() == []


@pytest.mark.both_stores  # through every layer down to the database
def test_a_restarted_controller_keeps_the_service_and_its_replicas(
    db_url: str, tmp_path: Path
) -> None:
    clock, data = ManualClock(T0), tmp_path / "controller"
    store = Store.open(db_url)
    try:
        with serve(store, data, clock) as a:
            user, agent = a.token("user", user="alice"), a.token("agent", node="node-0")
            alice, a0 = Client(a.url, user), AgentClient(a.url, agent)
            a.clients += [alice, a0]
            register(a0, "node-0")
            alice.create_service(SVC)
            cmds = launches(a0, "node-0", 2)
            started(a0, "node-0", cmds)
            wait_for("2 ready", lambda: alice.service("web").ready == 2)
        clock.advance(1)
        with serve(store, data, clock) as a:
            alice, a0 = Client(a.url, user), AgentClient(a.url, agent)
            a.clients += [alice, a0]
            a0.register(
                s.AgentRegister(
                    node="node-0",
                    address="127.0.0.1",
                    gpu_model="H100-SXM",
                    gpus=[
                        s.GpuInfo(
                            index=i, uuid=f"GPU-node-0-{i}", model="H100-SXM", memory_mib=81559
                        )
                        for i in range(8)
                    ],
                    cpu_cores=64,
                    memory_gib=256,
                    running=[s.TaskRef(job=c.job, attempt=c.attempt, rank=c.rank) for c in cmds],
                )
            )
            web = wait_for("ready again", lambda: (x := alice.service("web")).ready == 2 and x)
            assert [r.job_id for r in web.replicas] == ["web.1", "web.2"]  # no duplicates
            assert web.generation == 1 and web.desired == 2
            assert a0.commands("node-0", wait_s=0.5) == []  # nothing launched again
            up = alice.scale_service("web", 3)
            assert [r.job_id for r in up.replicas] == ["web.1", "web.2", "web.3"]
    finally:
        store.close()


def cli(api: Api, token: str, *args: str) -> Any:
    from typer.testing import CliRunner

    from gpufleet.cli.main import app

    env = {
        "GPUFLEET_SERVER": api.url,
        "GPUFLEET_TOKEN": token,
        "GPUFLEET_CONFIG": "/nonexistent/gpufleet.yaml",
        "COLUMNS": "200",
    }
    return CliRunner(env=env).invoke(app, list(args), catch_exceptions=False)


def test_the_cli_runs_lists_shows_updates_scales_and_removes(api: Api, tmp_path: Path) -> None:
    token = api.token("user", user="alice")
    a0 = api.agent("node-0")
    register(a0, "node-0")
    r = cli(api, token, "service", "run", "web", "--replicas", "2", "--gpus", "1", "--", "serve")
    assert r.exit_code == 0, r.output
    assert "service web: 2 replica(s) (web.1, web.2)" in r.output
    url = api.admin.service("web").endpoint.url  # type: ignore[union-attr]
    assert f"endpoint: {url}" in r.output and "shown this once" in r.output
    started(a0, "node-0", launches(a0, "node-0", 2))
    wait_for("ready", lambda: "2/2" in cli(api, token, "service", "ls").output)
    r = cli(api, token, "service", "ls", "--json")
    (row,) = json.loads(r.output)
    assert (row["name"], row["ready"], row["command"]) == ("web", 2, ["serve"])
    r = cli(api, token, "service", "show", "web")
    assert r.exit_code == 0 and "web.1" in r.output and "node-0" in r.output, r.output
    assert url in r.output and url in cli(api, token, "service", "ls").output
    assert "RUNNING" in r.output and "created" in r.output
    keep = tmp_path / "web.token"
    r = cli(api, token, "service", "token", "web", "--save-token", str(keep))
    assert r.exit_code == 0 and f"token:    in {keep}" in r.output, r.output
    assert keep.stat().st_mode & 0o777 == 0o600 and keep.read_text().strip() not in r.output
    again = cli(api, token, "service", "token", "web", "--save-token", str(keep))
    assert again.exit_code == 2 and "File exists" in again.output, again.output  # kept
    shown = json.loads(cli(api, token, "service", "show", "web", "--json").output)
    assert [x["job_id"] for x in shown["replicas"]] == ["web.1", "web.2"]

    r = cli(api, token, "service", "update", "web", "--image", "example/model:v2")
    assert r.exit_code == 0 and "rolling out generation 2" in r.output, r.output
    assert api.admin.service("web").image == "example/model:v2"
    r = cli(api, token, "service", "scale", "web", "1")
    assert r.exit_code == 0 and "1 replica(s) desired" in r.output, r.output

    f = tmp_path / "svc.yaml"
    f.write_text(
        "kind: service\nname: api\nreplicas: 1\nreplica:\n  gpus_per_worker: 1\n"
        "  command: [serve, --port, '8000']\nreadiness:\n  http: {path: /healthz}\n"
    )
    r = cli(api, token, "service", "run", "-f", str(f))
    assert r.exit_code == 0 and "service api: 1 replica(s)" in r.output, r.output
    assert api.admin.service("api").spec["readiness"]["http"]["path"] == "/healthz"

    r = cli(api, token, "service", "run", "Bad_Name", "--replicas", "1")
    assert r.exit_code == 1, r.output  # every problem, each with its field
    assert "body.spec.name" in r.output and "body.spec.replica.command" in r.output
    r = cli(api, token, "service", "show", "nope")
    assert r.exit_code == 1 and "no service nope (404)" in r.output
    assert "service ls" in r.output  # the hint
    r = cli(api, token, "service", "rm", "api")
    assert r.exit_code == 0 and "removing" in r.output


def test_scaling_an_autoscaled_service_moves_its_bounds(api: Api) -> None:
    alice = api.user("alice")
    auto = {**SVC, "name": "llm", "min": 1, "max": 4, "target_qps_per_replica": 5}
    auto.pop("replicas")
    out = alice.create_service(auto)
    assert out.desired == 1 and out.autoscale == {"min": 1, "max": 4, "target_qps_per_replica": 5}
    out = alice.scale_service("llm", minimum=2, maximum=6)
    assert out.desired == 2 and out.autoscale is not None and out.autoscale["max"] == 6
    assert out.generation == 1 and not out.rolling_out  # bounds are settings: no rollout
    assert "within min and max (2-6)" in refused(422, lambda: alice.scale_service("llm", 7))
    assert "give replicas" in refused(422, lambda: alice.scale_service("llm"))
    # a service of a fixed count gets bounds only with a target rate
    alice.create_service(SVC)
    msg = refused(422, lambda: alice.scale_service("web", minimum=1, maximum=3))
    assert "target_qps_per_replica" in msg


def test_without_a_gateway_a_service_has_no_endpoint(db_url: str, tmp_path: Path) -> None:
    store = Store.open(db_url)
    try:
        with serve(store, tmp_path / "controller", ManualClock(T0), gateway="off") as api:
            alice = api.user("alice")
            assert alice.create_service(SVC).endpoint is None
            assert alice.service("web").endpoint is None
            assert {r.routed for r in alice.service("web").replicas} == {None}
            assert "runs no gateway" in refused(409, lambda: alice.rotate_service_token("web"))
    finally:
        store.close()


def test_a_desktop_no_one_could_open_is_refused_at_desktop_run(db_url: str, tmp_path: Path) -> None:
    store = Store.open(db_url)
    try:
        with serve(store, tmp_path / "controller", ManualClock(T0), gateway="off") as api:
            token = api.token("user", user="alice")
            r = cli(api, token, "desktop", "run", "studio", "--gpu-share", "250")
            assert r.exit_code != 0 and "runs none (--gateway off)" in r.output
            assert "haproxy, nginx or builtin" in r.output
            assert api.admin.services() == []  # nothing made, no proxy started
    finally:
        store.close()


@pytest.mark.parametrize("gateway", ["nginx", "remote"])
def test_a_desktop_is_made_behind_nginx_which_asks_its_viewer_check(
    db_url: str, tmp_path: Path, gateway: str
) -> None:
    """Refused before ADR 0057 (nginx could not check a viewer's token); a gateway process
    on nginx (``--gateway remote``) likewise."""
    store = Store.open(db_url)
    try:
        with serve(store, tmp_path / "controller", ManualClock(T0), gateway=gateway) as api:
            token = api.token("user", user="alice")
            if gateway == "remote":  # a gateway process on nginx syncs once (gatewayd.py)
                admin = (tmp_path / "controller" / "admin.token").read_text().strip()
                http = over_httpx(api.url, admin, ca=None, transport=None, timeout=10)
                with contextlib.suppress(SyncError):  # no routes yet (503)
                    Follower(http, make_gateway("nginx"), wait_s=0.0).sync_once()
            r = cli(api, token, "desktop", "run", "studio", "--gpu-share", "250")
            assert r.exit_code == 0, r.output
            assert [s.name for s in api.admin.services()] == ["studio"]
    finally:
        store.close()
