"""Issue 26's heal loop, end to end on real processes (``LocalCluster``: a controller with a
heal policy and two agents with simulated 8-GPU nodes, heartbeat 1 s): an XID injected into a
node (written to the agent's ``DATA_DIR/inject`` once the state it needs holds) drains it; the
controller orders a GPU reset through the agent, then a burn-in (the GPUs at full load under
the agent's health checks, and validate's device layer run on the node), and the node returns
to service only once it passes. A recurring XID (``xid79@gpu0+1h``: the hardware logs it again
after every reset) fails each burn-in; the third failure within the window leaves the node
drained, its reason the verdict. Every step is in the node's history and the audit log."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from livehelp import wait_for

from gpufleet.core.controller import HEALTH_DRAIN
from gpufleet.core.healing import HEAL_RESUME
from gpufleet.ops.localcluster import LocalCluster
from gpufleet.server.store import Store

pytestmark = pytest.mark.e2e

POLICY = """\
heal:
  remedy: reset
  burn_in_s: 2
  max_failures: 3
  window_s: 86400
  step_timeout_s: 120
  network_min_gbps: 0.05  # loopback on a busy 2-core test machine
  network_max_rtt_ms: 100
"""
VERDICT = "3 XID 79 in 24 h: suspected hardware — RMA"


def inject(agent_dir: Path, fault: str) -> None:
    tmp = agent_dir / ".inject.tmp"
    tmp.write_text(fault + "\n")
    tmp.rename(agent_dir / "inject")


@contextlib.contextmanager
def running(request: pytest.FixtureRequest, tmp_path: Path, policy: str) -> Iterator[LocalCluster]:
    """A controller with ``policy`` and two agents, running; their logs shown on a failure."""
    path = tmp_path / "heal.yaml"
    path.write_text(policy)
    c = LocalCluster(tmp_path / "cluster", agents=2, controller_args=["--heal-policy", str(path)])
    failed = request.session.testsfailed
    raised = False
    try:
        c.start()
        c.wait_nodes(2)
        yield c
    except BaseException:  # the test's own failure passes through here before pytest counts it
        raised = True
        raise
    finally:
        c.stop()
        if raised or request.session.testsfailed != failed:
            for f in sorted(c.data_dir.glob("*.log")):
                print(f"----- {f.name}\n{f.read_text(errors='replace')[-6000:]}")


@pytest.fixture
def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LocalCluster]:
    with running(request, tmp_path, POLICY) as c:
        yield c


def cli(c: LocalCluster, *args: str, shim: bool = False) -> subprocess.CompletedProcess[str]:
    """``gpufleet ARGS`` (or ``python ARGS`` for a Slurm shim) as an admin, wide output."""
    env = dict(os.environ, COLUMNS="400", GPUFLEET_SERVER=c.url)
    env["GPUFLEET_TOKEN_FILE"] = str(c.admin_token_file)
    env.pop("GPUFLEET_TOKEN", None)
    argv = [sys.executable, *args] if shim else [sys.executable, "-m", "gpufleet.cli.main", *args]
    r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0, (argv, r.stdout, r.stderr)
    return r


def history(store: Store, node: str) -> list[tuple[str, str]]:
    return [(e.what, e.why) for e in store.node_events(node, limit=None)]


@pytest.mark.slow
def test_an_xid_is_healed_and_a_recurring_one_leaves_the_node_drained(
    cluster: LocalCluster,
) -> None:
    c = cluster
    store = Store.open(f"sqlite:///{c.data_dir / 'controller' / 'gpufleet.db'}")
    try:
        with c.admin() as admin:

            def node(name: str):  # type: ignore[no-untyped-def]
                return next(n for n in admin.nodes() if n.name == name)

            # a one-off XID: reset, burn-in, back in service
            inject(c.data_dir / "node-0", "xid79@gpu0")
            wait_for(
                "node-0 healed and back",
                lambda: ("resumed", HEAL_RESUME) in history(store, "node-0"),
                90,
            )
            # the health reports (unhealthy, then healthy after the reset) aside, in order:
            h0 = history(store, "node-0")
            whats = [w for w, _ in h0 if w not in ("healthy", "unhealthy")]
            assert whats == ["drained", "remediating", "burning in", "healed", "resumed"], h0
            steps = dict(history(store, "node-0"))
            assert steps["drained"].startswith(HEALTH_DRAIN) and "XID 79" in steps["drained"]
            assert steps["remediating"] == "remediating: GPU reset (round 1)"
            assert steps["burning in"].startswith("burning in: device, network with node-1")
            assert "GPU reset of 8 simulated GPUs" in steps["burning in"]
            assert "2 s of stress on 8 GPUs passed the health checks" in steps["healed"]
            assert "; network: " in steps["healed"] and "Gb/s" in steps["healed"]

            # the peer's half ran on node-1 as a node command (gpufleet validate's network layer);
            # node-1's agent reports its end on its own next call, which can come after node-0's
            # burn-in and resume: waited for, not read once
            def halves() -> list:  # type: ignore[type-arg]
                return [x for x in admin.node_commands("node-1") if x.kind == "validate"]

            wait_for("node-1's half done", lambda: [h.state for h in halves()] == ["done"], 30)
            (half,) = halves()
            assert "--net-rank 1" in half.command, half
            assert half.requested_by == "controller" and "for node-0 (round 1)" in half.why
            wait_for("node-0 idle", lambda: node("node-0").state == "idle", 30)
            alice = c.user("alice")
            (job,) = alice.submit(
                {"name": "both", "workers": 2, "gpus_per_worker": 8, "command": ["true"]}
            )
            wait_for("a gang on both nodes", lambda: alice.job(job).state == "SUCCEEDED", 60)

            # a recurring XID: every burn-in fails; the third failure gives the node up
            inject(c.data_dir / "node-1", "xid79@gpu0+1h")
            wait_for(
                "node-1 given up",
                lambda: ("rma", VERDICT) in history(store, "node-1"),
                120,
            )
            h = history(store, "node-1")
            assert [w for w, _ in h if w in ("remediating", "burning in", "heal failed")] == [
                "remediating",
                "burning in",
                "heal failed",
            ] * 2
            failures = [why for w, why in h if w == "heal failed"]
            assert all(
                f.startswith("burn-in failed: under stress: GPU 0: XID 79") for f in failures
            )
            n1 = node("node-1")
            assert n1.why == VERDICT and n1.state in ("drained", "unhealthy")
            time.sleep(3)  # heartbeats (healthy or not) never bring it back
            assert node("node-1").why == VERDICT
            assert "resumed" not in [w for w, _ in h[h.index(("rma", VERDICT)) :]]

            # where an operator looks: gpufleet nodes, gpufleet node NAME, sinfo's reason
            assert VERDICT in cli(c, "nodes").stdout
            shown = cli(c, "node", "node-1").stdout
            assert f"node node-1: {n1.state} ({VERDICT})" in shown
            assert "heal failed" in shown and "burn-in failed: under stress" in shown
            sinfo = cli(c, "-c", "from gpufleet.shims.sinfo import main; main()", "-N", "-h",
                        "-o", "%N|%t|%E", shim=True).stdout  # fmt: skip
            assert f"node-1|{'drain' if n1.state == 'drained' else 'fail'}|{VERDICT}" in sinfo

            metrics = admin.http.get("/metrics").text  # the alert NodeGivenUpAsHardware's
            assert 'gpufleet_node_heal_given_up{node="node-1"} 1' in metrics
            assert 'gpufleet_node_heal_given_up{node="node-0"} 0' in metrics
            assert 'gpufleet_node_heal_failures{node="node-1"} 3' in metrics

            audit = [(a.action, a.detail.get("why", "")) for a in admin.audit(500)]
            actions = {a for a, _ in audit}
            steps = {"remediating", "burning_in", "healed", "heal_failed", "rma"}
            assert {f"node.{s}" for s in steps} <= actions
            assert ("node.rma", VERDICT) in audit
            assert ("node.resumed", HEAL_RESUME) in audit
    finally:
        store.close()


@pytest.mark.slow
def test_the_site_s_command_as_the_remedy_runs_as_a_node_command(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    # the site's remedy resets the simulated GPUs the way a BMC power cycle would reset real
    # ones: from outside the agent (here through the simulator's inbox, by the node's name)
    data = tmp_path / "cluster"
    line = f"echo reset > {data}/{{node}}/.r && mv {data}/{{node}}/.r {data}/{{node}}/inject"
    policy = POLICY.replace("remedy: reset", f"remedy: command\n  command: '{line}'")
    with running(request, tmp_path, policy) as c:
        store = Store.open(f"sqlite:///{c.data_dir / 'controller' / 'gpufleet.db'}")
        try:
            inject(c.data_dir / "node-0", "xid79@gpu0")
            wait_for(
                "node-0 healed and back",
                lambda: ("resumed", HEAL_RESUME) in history(store, "node-0"),
                90,
            )
            h = history(store, "node-0")
            whats = [w for w, _ in h if w not in ("healthy", "unhealthy")]
            assert whats == [
                "drained",
                "remediating",
                "command",
                "command ended",
                "burning in",
                "healed",
                "resumed",
            ], [why for what, why in h if what == "heal failed"]
            steps = dict(h)
            assert steps["remediating"] == "remediating: the site's command (round 1)"
            assert "after the site's command (nc-" in steps["burning in"]
            assert "exit 0" in steps["burning in"]
            with c.admin() as admin:
                (cmd,) = admin.node_commands("node-0")
                assert cmd.exit_code == 0 and cmd.requested_by == "controller"
                assert cmd.command == line.replace("{node}", "node-0")
                audit = {a.action for a in admin.audit(500) if a.target == "node-0"}
            assert {"node.command", "node.remediating", "node.healed"} <= audit
        finally:
            store.close()


@pytest.mark.slow
def test_a_controller_restarted_mid_burn_in_heals_the_node_from_its_history(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    # a long burn-in, and the controller SIGKILLed in it: the restarted controller reads the
    # loop back from the node's history, voids the round it did not see end (its answer, when
    # it comes, is stale) and proves the node with a round of its own before it serves again
    policy = POLICY.replace("burn_in_s: 2", "burn_in_s: 8")
    with running(request, tmp_path, policy) as c:
        store = Store.open(f"sqlite:///{c.data_dir / 'controller' / 'gpufleet.db'}")
        try:
            inject(c.data_dir / "node-0", "xid79@gpu0")
            wait_for(
                "node-0 burning in", lambda: "burning in" in dict(history(store, "node-0")), 60
            )
            proc = c.controller
            c.kill_controller()
            assert proc is not None
            proc.wait(timeout=30)
            c.start_controller()
            wait_for(
                "node-0 healed and back",
                lambda: ("resumed", HEAL_RESUME) in history(store, "node-0"),
                120,
            )
            h = history(store, "node-0")
            steps = [(w, why) for w, why in h if w in ("remediating", "burning in", "healed")]
            assert [w for w, _ in steps] == [
                "remediating",
                "burning in",
                "remediating",
                "burning in",
                "healed",
            ], h
            assert steps[2][1] == "remediating: GPU reset (round 2)"  # numbered on, not again
            assert "(round 2)" in steps[4][1]
            assert "heal failed" not in [w for w, _ in h]  # a restart is not the node's failure
            with c.admin() as admin:
                wait_for(
                    "node-0 idle",
                    lambda: next(n for n in admin.nodes() if n.name == "node-0").state == "idle",
                    30,
                )
        finally:
            store.close()
