"""Issue 4's acceptance, end to end on real processes (``LocalCluster``: a controller and four
agents with simulated 8-GPU nodes on 127.0.0.1, heartbeat 1 s): XID 79 injected into GPU 0 of a
node that runs a 2-node gang → within two heartbeat intervals of the XID the node is drained,
the gang restarts on healthy nodes without using a retry, and — where Debian's ``prometheus`` is
installed — the alert fires in a real Prometheus scraping the controller. Then the agent is
restarted on a reset GPU, passes its checks, and the node returns to service by itself.

The XID's instant is the agent's start (its first log line, the simulated GPUs' clock zero) plus
the injection's offset; the drain's is the controller's own node event time."""

from __future__ import annotations

import shutil
import signal
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import TypeVar

import pytest

from gpufleet.core.controller import HEALTH_DRAIN, HEALTH_RESUME
from gpufleet.ops.localcluster import LocalCluster
from gpufleet.server.store import Store

pytestmark = pytest.mark.e2e

HEARTBEAT_S = 1.0
XID_AT_S = 25  # after the faulty agent starts: time enough for the gang to be running
T = TypeVar("T")


def wait_for(what: str, check: Callable[[], T], timeout_s: float, every_s: float = 0.1) -> T:
    deadline = time.monotonic() + timeout_s
    last: object = None
    while time.monotonic() < deadline:
        try:
            v = check()
        except Exception as e:  # a process still starting
            last = e
        else:
            if v:
                return v
            last = v
        time.sleep(every_s)
    raise AssertionError(f"{what}: not within {timeout_s:g} s (last: {last!r})")


def agent_start(log: Path, node: str) -> float:
    """Wall time of the agent's 'agent NODE → …' line: its simulated GPUs start then."""
    for line in log.read_text(errors="replace").splitlines():
        if f" agent {node} " in line:
            stamp = line[:23]  # logging's asctime: 2024-01-01 12:00:00,123
            return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()
    raise AssertionError(f"no start line in {log}")


@pytest.fixture
def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LocalCluster]:
    c = LocalCluster(tmp_path / "cluster", agents=4, heartbeat_s=HEARTBEAT_S)
    failed = request.session.testsfailed
    try:
        yield c
    finally:
        c.stop()
        if request.session.testsfailed != failed:  # the logs say what the processes saw
            for f in sorted(c.data_dir.glob("*.log")):
                print(f"----- {f.name}\n{f.read_text(errors='replace')[-4000:]}")


def test_xid79_drains_the_node_restarts_the_gang_fires_the_alert_and_heals(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    c = cluster
    c.start_controller()
    # the faulty node and one more first, so that the gang lands on both
    c.start_agent(0, "--inject", f"xid79@gpu0:{XID_AT_S}s")
    c.start_agent(1)
    c.wait_nodes(2)
    alice = c.user("alice")
    (job,) = alice.submit(
        {"name": "ddp", "workers": 2, "gpus_per_worker": 8, "command": ["sleep", "600"]}
    )
    first = wait_for("the gang running", lambda: (j := alice.job(job)).state == "RUNNING" and j, 30)
    assert {p.node for p in first.placement} == {"node-0", "node-1"}
    c.start_agent(2)
    c.start_agent(3)
    c.wait_nodes(4)

    prom = None
    if shutil.which("prometheus"):
        from gpufleet.monitoring.local import LocalPrometheus

        prom = LocalPrometheus(tmp_path / "prom", f"127.0.0.1:{c.port}", interval_s=1.0)
    try:
        if prom is not None:
            wait_for("prometheus scraping the controller", prom.targets_up, 60)
        xid_at = agent_start(c.data_dir / "node-0.log", "node-0") + XID_AT_S
        assert time.time() < xid_at, "the gang took longer to start than the XID waits"

        # drained within two heartbeat intervals of the XID
        store = Store.open(f"sqlite:///{c.data_dir / 'controller' / 'gpufleet.db'}")
        try:
            drained = wait_for(
                "node-0 drained",
                lambda: [
                    e
                    for e in store.node_events("node-0", limit=None)
                    if e.what == "drained" and e.why.startswith(HEALTH_DRAIN)
                ],
                XID_AT_S + 30,
            )[0]
            assert "XID 79" in drained.why
            assert drained.time - xid_at <= 2 * HEARTBEAT_S, (drained.time - xid_at, drained)
            with c.admin() as admin:
                node0 = next(n for n in admin.nodes() if n.name == "node-0")
            assert node0.state == "unhealthy" and "XID 79" in node0.why

            # the gang restarts on healthy nodes, its retries untouched
            again = wait_for(
                "the gang running again",
                lambda: (j := alice.job(job)).state == "RUNNING" and j.attempt == 2 and j,
                60,
            )
            assert "node-0" not in {p.node for p in again.placement}
            assert again.retries_used == 0
            moves = [e.state for e in alice.job(job).events if e.attempt == 1]
            assert moves[-2:] == ["NODE_LOST", "PENDING"]

            # the alert fires in a real Prometheus
            if prom is not None:
                firing = wait_for(
                    "GpuCriticalXid firing",
                    lambda: (f := prom.firing()).get("GpuCriticalXid") and f,
                    60,
                )
                (xid,) = firing["GpuCriticalXid"]
                assert (xid["Hostname"], xid["gpu"], xid["xid"]) == ("node-0", "0", "79")
                wait_for(
                    "NodeDrainedByHealthCheck firing",
                    lambda: (
                        [a["node"] for a in prom.firing().get("NodeDrainedByHealthCheck", [])]
                        == ["node-0"]
                    ),
                    30,
                )

            # the GPU is reset and the agent restarted: it passes its checks, and the node
            # returns to service by itself
            c.kill_agent("node-0", signal.SIGTERM)
            c.agent_procs["node-0"].proc.wait(timeout=30)
            c.start_agent(0)

            def back() -> bool:
                with c.admin() as admin:
                    n = next(n for n in admin.nodes() if n.name == "node-0")
                return n.state == "idle"

            wait_for("node-0 back in service", back, 60)
            last = store.node_events("node-0", limit=None)[-1]
            assert last.what == "resumed" and last.why in (HEALTH_RESUME, "registered again")
            with c.admin() as admin:
                audit = [(a.actor, a.action) for a in admin.audit(500) if a.target == "node-0"]
            assert ("system:controller", "node.unhealthy") in audit
            assert ("system:controller", "node.drained") in audit
            if prom is not None:
                wait_for(
                    "the health alert resolved",
                    lambda: "NodeDrainedByHealthCheck" not in prom.firing(),
                    30,
                )
        finally:
            store.close()
    finally:
        if prom is not None:
            prom.stop()
