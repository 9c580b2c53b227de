"""Health through the real API (uvicorn on 127.0.0.1, SQLite, the controller loop running; a
ManualClock so no deadline passes unless a test moves it), with scripted agents
(``AgentClient``) that report what a node agent would:

a failed check marks the node unhealthy and drains it (nothing new is placed there), the jobs
on its bad GPUs are requeued without using their retries; it returns to service only when its
agent passes its checks again, and never out of an admin's drain; an admin forces it either way;
every such event is in the node's history (node_events), the audit log and /metrics."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpufleet.api import schemas as s
from gpufleet.base.clock import ManualClock
from gpufleet.client import Client
from gpufleet.client.http import AgentClient
from gpufleet.core.controller import HEALTH_DRAIN, HEALTH_RESUME
from gpufleet.server.app import create_app
from gpufleet.server.config import ServerConfig
from gpufleet.server.store import Store
from support import ports
from support.serving import serve_app
from support.waiting import wait_for

T0 = 1_700_000_000.0
GANG: dict[str, Any] = {
    "name": "gang",
    "workers": 2,
    "gpus_per_worker": 8,
    "command": ["sleep", "600"],
    "max_retries": 1,
}


@dataclass
class Server:
    """A controller app served by uvicorn on a free port of 127.0.0.1."""

    url: str
    clock: ManualClock
    store: Store
    admin: Client
    stop: contextlib.ExitStack
    clients: list[Any] = field(default_factory=list)
    _n: int = 0

    def token(self, role: str, **kw: Any) -> str:
        self._n += 1
        out = self.admin.create_token(s.TokenCreate(name=f"{role}-{self._n}", role=role, **kw))
        assert out.token
        return out.token

    def agent(self, node: str) -> Agent:
        c = AgentClient(self.url, self.token("agent", node=node))
        self.clients.append(c)
        a = Agent(node, c)
        a.register()
        return a

    def user(self, name: str) -> Client:
        c = Client(self.url, self.token("user", user=name))
        self.clients.append(c)
        return c

    def metrics(self, token: str | None = None) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.get(self.url + "/metrics", headers=headers, timeout=30)

    def node(self, name: str) -> s.NodeOut:
        return next(n for n in self.admin.nodes() if n.name == name)

    def history(self, name: str) -> list[tuple[str, str]]:
        return [(e.what, e.why) for e in self.store.node_events(name, limit=None)]

    def audit(self, target: str) -> list[tuple[str, str]]:
        return [(a.actor, a.action) for a in reversed(self.admin.audit(1000)) if a.target == target]

    def close(self) -> None:
        for c in [self.admin, *self.clients]:
            c.close()
        self.stop.close()
        self.store.close()


def serve(tmp: Path, config: dict[str, Any] | None = None, **extra: str) -> Server:
    """``config``: ServerConfig's fields; ``extra``: its ``extra`` settings."""
    clock = ManualClock(T0)
    db = f"sqlite:///{tmp / 'gpufleet.db'}"
    store = Store.open(db)
    # the ManualClock stands still: no gap to wait between passes
    cfg = ServerConfig(
        data_dir=tmp / "controller",
        db_url=db,
        extra=dict(extra),
        min_pass_gap_s=0.0,
        **ports.gateway_ports(),  # not another xdist worker's endpoints
        **(config or {}),
    )
    app = create_app(cfg, store=store, clock=clock)
    stop = contextlib.ExitStack()
    url = stop.enter_context(serve_app(app))
    token = (tmp / "controller" / "admin.token").read_text().strip()
    return Server(url, clock, store, Client(url, token), stop)


def gpu_payload(node: str, n: int = 8, **over: dict[str, float]) -> dict[str, Any]:
    """A heartbeat's metrics as the agent sends them; ``over`` sets values of GPU ``gN``."""
    gpus = []
    for i in range(n):
        values: dict[str, float] = {
            "DCGM_FI_DEV_GPU_UTIL": 100.0,
            "DCGM_FI_DEV_GPU_TEMP": 60.0,
            "DCGM_FI_DEV_POWER_USAGE": 500.0,
            "DCGM_FI_DEV_FB_USED": 70000,
            "DCGM_FI_DEV_FB_FREE": 11000,
            "DCGM_FI_DEV_XID_ERRORS": 0,
            "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": 0,
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": 123_456_789,
        }
        values.update(over.get(f"g{i}", {}))
        gpus.append(
            {
                "labels": {
                    "gpu": str(i),
                    "UUID": f"GPU-{node}-{i}",
                    "modelName": "H100-SXM",
                    "pci_bus_id": f"00000000:{0x18 + 0x10 * i:02X}:00.0",
                },
                "values": values,
                "xids": [],
            }
        )
    return {"schema": 1, "gpus": gpus, "host": {"cpu_percent": 10.0}}


@dataclass
class Agent:
    """Says what a node agent says: register, heartbeat (health + metrics), start and exit."""

    node: str
    client: AgentClient
    running: set[tuple[str, int, int]] = field(default_factory=set)

    def register(self) -> None:
        self.client.register(
            s.AgentRegister(
                node=self.node,
                address="127.0.0.1",
                gpu_model="H100-SXM",
                gpus=[
                    s.GpuInfo(
                        index=i, uuid=f"GPU-{self.node}-{i}", model="H100-SXM", memory_mib=81559
                    )
                    for i in range(8)
                ],
                cpu_cores=64,
                memory_gib=256,
                driver_version="550.54.15",
                running=[s.TaskRef(job=j, attempt=a, rank=r) for j, a, r in self.running],
            )
        )

    def heartbeat(
        self, healthy: bool = True, why: str = "", bad: list[int] | None = None, **over: Any
    ) -> None:
        self.client.heartbeat(
            self.node,
            s.Heartbeat(
                health=s.Health(healthy=healthy, why=why, bad_gpus=bad or []),
                metrics=gpu_payload(self.node, **over),
                running=[s.TaskRef(job=j, attempt=a, rank=r) for j, a, r in self.running],
            ),
        )

    def step(self) -> list[s.AgentCommand]:
        """Take the commands waiting for this node: start what is launched, end what is
        killed (as a killed task exits), and report both."""
        cmds = self.client.commands(self.node, wait_s=0.2)
        evs = []
        for c in cmds:
            key = (c.job, c.attempt, c.rank)
            if c.kind == "launch":
                self.running.add(key)
                evs.append(s.AgentEvent(kind="started", job=c.job, attempt=c.attempt, rank=c.rank))
            elif key in self.running:
                self.running.discard(key)
                evs.append(
                    s.AgentEvent(
                        kind="exited",
                        job=c.job,
                        attempt=c.attempt,
                        rank=c.rank,
                        exit_code=-15,
                        why=c.why,
                    )
                )
        if evs:
            self.client.events(self.node, evs)
        return cmds


@pytest.fixture
def srv(tmp_path: Path) -> Iterator[Server]:
    # the plain health path, as with --no-heal: a node drained for a GPU fault returns when its
    # agent reports healthy (the heal loop, on by default, is tests/e2e/test_heal_loop.py's and
    # test_by_default_a_node_drained_for_a_gpu_fault_is_remediated_before_it_returns's)
    srv = serve(tmp_path, config={"heal": False})
    try:
        yield srv
    finally:
        srv.close()


def drive(agents: list[Agent], until: Callable[[], Any], what: str, timeout_s: float = 10) -> Any:
    """Let the agents act on their commands until ``until()`` holds."""

    def step() -> Any:
        for a in agents:
            a.step()
        return until()

    return wait_for(what, step, timeout_s)


def metric(text: str, name: str, **labels: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_a_failed_check_drains_requeues_uncharged_and_heals_back(srv: Server) -> None:
    n0, n1, n2 = (srv.agent(f"n{i}") for i in range(3))
    for a in (n0, n1, n2):
        a.heartbeat()
    srv.admin.drain("n2", "held back for the test")  # so the gang lands on n0 + n1
    alice = srv.user("alice")
    (job,) = alice.submit(GANG)
    drive([n0, n1], lambda: alice.job(job).state == "RUNNING", "the gang running")
    assert {p.node for p in alice.job(job).placement} == {"n0", "n1"}
    srv.admin.resume("n2")

    n0.heartbeat(False, "GPU 3: XID 79 (GPU has fallen off the bus)", [3])
    wait_for("n0 unhealthy and drained", lambda: srv.node("n0").state == "unhealthy")
    history = srv.history("n0")
    assert ("unhealthy", "GPU 3: XID 79 (GPU has fallen off the bus)") in history
    assert ("drained", f"{HEALTH_DRAIN}: GPU 3: XID 79 (GPU has fallen off the bus)") in history
    # the gang's rank on the bad GPU is lost: both ranks stop, the job is requeued and restarts
    # on healthy nodes, and the infrastructure fault is not charged to its retries
    out = drive(
        [n0, n1, n2],
        lambda: (j := alice.job(job)).state == "RUNNING" and j.attempt == 2 and j,
        "the gang running again",
    )
    assert {p.node for p in out.placement} == {"n1", "n2"}
    assert out.retries_used == 0
    moves = [e.state for e in alice.job(job).events if e.attempt == 1]
    assert moves[-2:] == ["NODE_LOST", "PENDING"]
    # nothing new goes to the drained node: n1 and n2 are full, n0 has 7 good GPUs free
    (small,) = alice.submit({"name": "one", "gpus_per_worker": 1, "command": ["sleep", "60"]})
    reason = wait_for("a reason", lambda: alice.job(small).reason)
    for a in (n0, n1, n2):
        a.step()
    assert alice.job(small).state == "PENDING", reason

    text = srv.metrics(srv.token("metrics")).text
    assert metric(text, "gpufleet_node_health_drained", node="n0") == 1
    assert metric(text, "gpufleet_gpu_healthy", Hostname="n0", gpu="3") == 0
    assert metric(text, "gpufleet_gpu_healthy", Hostname="n0", gpu="2") == 1
    assert metric(text, "gpufleet_node_events_total", node="n0", event="drained") == 1
    assert metric(text, "gpufleet_node_state", node="n0", state="unhealthy") == 1

    # the agent passes its checks again (the GPU was reset): back in service by itself
    n0.heartbeat()
    wait_for("n0 back", lambda: srv.node("n0").state in ("idle", "mixed"))
    assert srv.history("n0")[-2:] == [("healthy", ""), ("resumed", HEALTH_RESUME)]
    assert srv.audit("n0")[-4:] == [
        ("system:controller", "node.unhealthy"),
        ("system:controller", "node.drained"),
        ("system:controller", "node.healthy"),
        ("system:controller", "node.resumed"),
    ]
    text = srv.metrics(srv.token("metrics")).text
    assert metric(text, "gpufleet_node_health_drained", node="n0") == 0
    assert metric(text, "gpufleet_node_events_total", node="n0", event="resumed") == 1
    # and it takes work again: the small job that waited starts there
    drive([n0, n1, n2], lambda: alice.job(small).state == "RUNNING", "the small job running")
    assert alice.job(small).placement[0].node == "n0"


def test_by_default_a_node_drained_for_a_gpu_fault_is_remediated_before_it_returns(
    tmp_path: Path,
) -> None:
    # no --heal-policy, no heal: in a cluster spec: the heal loop runs with its defaults, so a
    # healthy report alone no longer returns the node (ADR 0042): it waits for its remediation
    srv = serve(tmp_path)
    try:
        n0 = srv.agent("n0")
        n0.heartbeat()
        n0.heartbeat(False, "GPU 3: XID 79 (GPU has fallen off the bus)", [3])
        wait_for("n0 drained", lambda: srv.node("n0").state == "unhealthy")
        n0.heartbeat()
        wait_for(
            "n0 remediating",
            lambda: ("remediating", "remediating: GPU reset (round 1)") in srv.history("n0"),
        )
        assert srv.node("n0").state not in ("idle", "mixed")
        assert ("resumed", HEALTH_RESUME) not in srv.history("n0")
    finally:
        srv.close()


def test_an_admins_drain_outlives_a_health_recovery(srv: Server) -> None:
    n0 = srv.agent("n0")
    n0.heartbeat()
    srv.admin.drain("n0", "swap the fans")
    n0.heartbeat(False, "GPU 1: 95 °C over the 90 °C limit", [1])
    wait_for("unhealthy", lambda: srv.node("n0").state == "unhealthy")
    n0.heartbeat()
    wait_for("healthy again", lambda: srv.node("n0").state == "drained")
    assert srv.node("n0").why == ""  # the health report's (empty) why; still drained
    time.sleep(0.2)  # a turn or two: nothing un-drains it
    assert srv.node("n0").state == "drained"
    whats = [w for w, _ in srv.history("n0")]
    assert whats == ["drained", "unhealthy", "healthy"]  # no health drain, no resume


def test_an_admin_forces_either_way(srv: Server) -> None:
    n0 = srv.agent("n0")
    n0.heartbeat()
    # out of service although healthy: an admin's drain
    srv.admin.drain("n0", "firmware update")
    assert srv.node("n0").state == "drained"
    srv.admin.resume("n0")
    n0.heartbeat(False, "GPU 0: 2 double-bit ECC errors", [0])
    wait_for("health-drained", lambda: srv.node("n0").state == "unhealthy")
    # a plain resume clears the controller's drain, but the failing checks keep it out
    srv.admin.resume("n0")
    n = srv.node("n0")
    assert n.state == "unhealthy"
    text = srv.metrics(srv.token("metrics")).text
    assert metric(text, "gpufleet_node_drained", node="n0") == 0
    assert metric(text, "gpufleet_node_healthy", node="n0") == 0
    # forced: back into service while the agent still reports the failure
    r = httpx.post(
        srv.url + "/api/v1/nodes/n0/resume",
        params={"force": "true"},
        headers=dict(srv.admin.http.headers),
        timeout=10,
    )
    assert r.status_code == 200, r.text
    assert r.json()["state"] == "idle"
    n0.heartbeat(False, "GPU 0: 2 double-bit ECC errors", [0])  # the same report: no news
    time.sleep(0.2)
    assert srv.node("n0").state == "idle"
    audit = srv.admin.audit(20)
    forced = next(a for a in audit if a.action == "node.resume" and a.target == "n0")
    assert forced.detail.get("force") is True and forced.actor.startswith("admin:")
    assert srv.history("n0")[-2:] == [
        ("resumed", "resumed by admin (forced)"),
        ("healthy", "forced by admin: resumed by admin (forced)"),
    ]
    # a new failure drains it again
    n0.heartbeat(False, "GPU 5: XID 48 (double-bit ECC error (DBE))", [5])
    wait_for("drained again", lambda: srv.node("n0").state == "unhealthy")


def test_a_health_drained_node_returns_after_its_agent_restarts_healthy(srv: Server) -> None:
    n0 = srv.agent("n0")
    n0.heartbeat(False, "GPU 2: XID 79 (GPU has fallen off the bus)", [2])
    wait_for("drained", lambda: srv.node("n0").state == "unhealthy")
    n0.register()  # the agent restarts after the GPU reset: its checks start clean
    n0.heartbeat()  # the same (healthy) report it would give a fresh link: it counts
    wait_for("back in service", lambda: srv.node("n0").state == "idle")
    assert srv.history("n0")[-1] == ("resumed", HEALTH_RESUME)


def test_metrics_need_a_metrics_or_admin_token_by_default(tmp_path: Path) -> None:
    srv = serve(tmp_path / "closed", metrics_token="scrape-secret")
    try:
        r = srv.metrics()
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
        assert "--role metrics" in r.json()["detail"] and "credentials_file" in r.json()["detail"]
        assert srv.metrics("gf_wrong").status_code == 401
        for role, kw in (("user", {"user": "alice"}), ("agent", {"node": "n0"})):
            r = srv.metrics(srv.token(role, **kw))
            assert r.status_code == 403 and f"{role} token may not read" in r.json()["detail"]
        # the metrics token as the README makes it: the CLI, its secret in a 0600 file
        admin_file = tmp_path / "closed" / "controller" / "admin.token"
        out = tmp_path / "prometheus.token"
        env = {**os.environ, "GPUFLEET_SERVER": srv.url, "GPUFLEET_TOKEN_FILE": str(admin_file)}
        create = ["token", "create", "prometheus", "--role", "metrics", "--out", str(out)]
        made = subprocess.run(
            [sys.executable, "-m", "gpufleet.cli.main", *create],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
        assert made.returncode == 0, made.stderr
        assert "prometheus (metrics) created" in made.stderr and out.stat().st_mode & 0o077 == 0
        scraper, admin_token = out.read_text().strip(), admin_file.read_text().strip()
        for ok in (scraper, admin_token, "scrape-secret"):  # the configured one still works
            r = srv.metrics(ok)
            assert r.status_code == 200, r.text
            assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
            assert "gpufleet_build_info" in r.text and ok not in r.text
        # a metrics token reads /metrics and nothing else
        r = httpx.get(srv.url + "/api/v1/jobs", headers={"Authorization": f"Bearer {scraper}"})
        assert r.status_code == 403
    finally:
        srv.close()


def _alice_running(srv: Server) -> None:
    n0 = srv.agent("n0")
    n0.heartbeat()
    alice = srv.user("alice")
    (job,) = alice.submit({"name": "one", "gpus_per_worker": 1, "command": ["sleep", "60"]})
    drive([n0], lambda: alice.job(job).state == "RUNNING", "alice's job running")
    n0.heartbeat()  # its GPU's series now name the job


def test_a_public_metrics_names_no_user_unless_told_to(tmp_path: Path) -> None:
    srv = serve(tmp_path / "public", config={"metrics_public": True})
    try:
        _alice_running(srv)
        r = srv.metrics()
        assert r.status_code == 200 and 'hpc_job="' in r.text
        assert "alice" not in r.text and "user=" not in r.text
        schema = httpx.get(srv.url + "/api/v1/openapi.json").json()
        assert schema["paths"]["/metrics"]["get"]["security"] == [{}]
    finally:
        srv.close()
    cfg = {"metrics_public": True, "metrics_user_labels": True}
    srv = serve(tmp_path / "named", config=cfg)
    try:
        _alice_running(srv)
        assert 'user="alice"' in srv.metrics().text
    finally:
        srv.close()
