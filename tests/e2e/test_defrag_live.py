"""Defragmentation live (issue 25, ADR 0045), on a real cluster (``LocalCluster``: a controller
process and 4 agents of 8 simulated GPUs in 2 leaves): a 2 x 8-GPU gang that must stay under
one leaf, while every node has 4 GPUs taken, frees leaf-1. There a batch job is preempted at
once, and a service replica (the model stub, with an HTTP readiness probe) is moved
make-before-break: its replacement starts on leaf-0 and is ready before the old replica stops.
The gang's Reason says what is happening, through ``gpufleet show``, and it starts on leaf-1."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from livehelp import wait_for, wait_state

from gpufleet.api.schemas import TokenCreate
from gpufleet.ops.localcluster import LocalCluster
from gpufleet.ops.stubservice import stub_spec

pytestmark = pytest.mark.e2e
PY = sys.executable
SLEEP = [PY, "-c", "import time; time.sleep(600)"]
# the stub's own readiness answer, as its HTTP probe asks for it
HEALTHZ = (
    f"{PY} -c 'import os, urllib.request as u; "
    'u.urlopen("http://127.0.0.1:%s/healthz" % os.environ["PORT"], timeout=5)\''
)


def _pinned(name: str, node: str, gpus: int, **kw: Any) -> dict[str, Any]:
    return {"name": name, "gpus_per_worker": gpus, "nodelist": [node], "command": SLEEP, **kw}


def test_a_gang_frees_one_leaf_and_a_moved_replica_is_ready_before_its_old_one_stops(
    new_cluster: Any, tmp_path: Path
) -> None:
    c: LocalCluster = new_cluster(
        agents=4,
        leaves=2,
        gateway="off",
        controller_args=["--preempt", "defrag", "--defrag", "interval_s=0,leaf_interval_s=0"],
    )
    with c.admin() as a:
        token = a.create_token(TokenCreate(name="alice-defrag", role="user", user="alice")).token
    assert token
    alice = c.client(token)
    # leaf-0 (node-0, node-1) and node-3 full for a moment, so the replica lands on node-2
    holds = [alice.submit(_pinned(f"hold{i}", f"node-{i}", 8))[0] for i in (0, 1, 3)]
    for h in holds:
        wait_state(alice, h, "RUNNING", 60)
    svc = stub_spec("web", 1)
    svc["replica"] = {**svc["replica"], "gpus_per_worker": 4}
    # the replacement is ready only once the test opens the gate: the move's window holds
    # still while the test looks at it from outside (a timed window closed under load)
    gate = tmp_path / "replacement-may-be-ready"
    svc["readiness"] = {
        "command": [
            "/bin/sh",
            "-c",
            f'[ "$GPUFLEET_JOB_ID" = web.1 ] || [ -e {gate} ] && {HEALTHZ}',
        ],
        "period_s": 0.5,
        "timeout_s": 10,
        "failure_threshold": 1,
    }
    alice.create_service(svc)
    wait_for("web.1 ready", lambda: alice.service("web").ready == 1, 90)
    assert alice.job("web.1").placement[0].node == "node-2"
    for h in holds:
        alice.cancel(h)
    for h in holds:
        wait_state(alice, h, "CANCELLED", 60)
    # every node half taken: b0, b1 may not be moved, so leaf-1 (web.1, b3) is the one freed
    fixed = [alice.submit(_pinned(f"b{i}", f"node-{i}", 4, preemptible=False))[0] for i in (0, 1)]
    (b3,) = alice.submit(_pinned("b3", "node-3", 4))
    for j in (*fixed, b3):
        wait_state(alice, j, "RUNNING", 60)

    (g,) = alice.submit(
        {
            "name": "gang",
            "workers": 2,
            "gpus_per_worker": 8,
            "topology": {"level": "leaf", "required": True},
            "command": "sleep 1",
        }
    )
    said = wait_for(
        "the gang's Reason says the move and what it waits for",
        lambda: (r := alice.job(g).reason) is not None and "1 of 2 stopped" in r.message and r,
        60,
    )
    assert said.code == "Defragmenting"
    assert said.message == (
        "moving 2 jobs to free 2 nodes under leaf-1: 1 of 2 stopped; web.1 stops once its "
        "replacement is ready"
    )
    env = {**os.environ, "GPUFLEET_SERVER": c.url, "GPUFLEET_TOKEN": token, "COLUMNS": "200"}
    shown = subprocess.run(
        [PY, "-m", "gpufleet.cli.main", "show", g], env=env, capture_output=True, text=True
    )
    assert "Defragmenting: moving 2 jobs to free 2 nodes under leaf-1: 1 of 2" in shown.stdout
    assert alice.job("web.1").state == "RUNNING"  # still serving: its replacement is not ready
    gate.touch()

    done = wait_state(alice, g, "SUCCEEDED", 180)
    assert sorted(p.node for p in done.placement) == ["node-2", "node-3"]
    web = alice.service("web")
    events = {e.what: e for e in web.events or []}
    assert "replica moving" in events and "replica moved" in events, web.events
    new = [r for r in web.replicas if r.job_id != "web.1"]
    assert new and new[0].node in ("node-0", "node-1")
    ready = [e for e in web.events or [] if e.what == "replica ready" and new[0].job_id in e.why]
    old_end = alice.job("web.1").end_time
    assert ready and old_end is not None and ready[0].time <= old_end  # made before broken
    assert alice.job("web.1").state == "CANCELLED"
    assert alice.job(b3).state in ("PENDING", "RUNNING", "STARTING")  # requeued, not failed


def test_a_restarted_controller_keeps_its_move_in_progress(new_cluster: Any) -> None:
    """The controller is SIGKILLed and started again while the move's victim writes its
    checkpoint (its notice's grace): the new one knows the move (the gang's Reason says it, the
    leaf stays held for the gang), the victim's end is a preemption (requeued, not failed) and
    the gang starts on the leaf it freed."""
    c: LocalCluster = new_cluster(
        agents=4,
        leaves=2,
        gateway="off",
        node_grace_s=0.0,  # the default for this tolerance
        controller_args=[
            *("--preempt", "defrag", "--defrag", "interval_s=0,leaf_interval_s=0"),
            *("--outage-tolerance-s", "60"),  # the agents keep their tasks while it is down
        ],
    )
    alice = c.user("alice")
    # every node half taken; b0, b1 may not be moved, so leaf-1 (b2, b3) is the one freed.
    # b3 asks for a notice it ignores: it stops only when the agent's wait is over (60 s,
    # more than the restart takes on a loaded machine)
    fixed = [alice.submit(_pinned(f"b{i}", f"node-{i}", 4, preemptible=False))[0] for i in (0, 1)]
    (b2,) = alice.submit(_pinned("b2", "node-2", 4))
    deaf = ["sh", "-c", "trap '' USR1; sleep 600"]
    (b3,) = alice.submit(
        _pinned("b3", "node-3", 4, command=deaf, checkpoint={"signal": "USR1", "grace_s": 60})
    )
    for j in (*fixed, b2, b3):
        wait_state(alice, j, "RUNNING", 60)
    gang = {
        "name": "gang",
        "workers": 2,
        "gpus_per_worker": 8,
        "topology": {"level": "leaf", "required": True},
        "command": "sleep 1",
    }
    (g,) = alice.submit(gang)
    wait_for("b2 stopped", lambda: alice.job(b2).state == "PENDING", 60)
    assert alice.job(b3).state == "RUNNING"  # in its notice's wait
    c.kill_controller()  # SIGKILL, mid-move
    c.start_controller()
    c.wait_nodes(4)
    said = wait_for(
        "the restarted controller says the move",
        lambda: (r := alice.job(g).reason) is not None and r.code == "Defragmenting" and r,
        30,
    )
    assert said.message.startswith("moving 2 jobs to free 2 nodes under leaf-1: 1 of 2 stopped")
    assert alice.job(b3).state == "RUNNING"  # still in its wait: the move is the old one
    done = wait_state(alice, g, "SUCCEEDED", 120)
    assert sorted(p.node for p in done.placement) == ["node-2", "node-3"]
    states = [e.state for e in alice.job(b3).events or []]
    assert states[:5] == ["PENDING", "STARTING", "RUNNING", "PREEMPTED", "PENDING"], states
    assert "FAILED" not in states
    assert alice.job(b3).retries_used == 0
