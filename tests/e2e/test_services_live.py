"""Services on a real cluster (``LocalCluster``: a controller process and agent processes with
simulated GPUs on 127.0.0.1): a service's replicas are jobs that the agents run as real
processes; it scales; the controller is SIGKILLed and started again and the service keeps the
same replicas and generation (nothing runs twice); removing it stops every replica."""

from __future__ import annotations

import sys
from collections.abc import Callable

import pytest
from livehelp import wait_for

from gpufleet.ops.localcluster import LocalCluster

pytestmark = pytest.mark.e2e
PY = sys.executable
SLEEP = [PY, "-c", "import time; time.sleep(900)"]


def test_a_service_runs_on_the_agents_and_survives_a_controller_restart(
    new_cluster: Callable[..., LocalCluster],
) -> None:
    # a lease longer than the controller's restart (its start and migrations took 2.7 s on a
    # busy CI box, past the default 1.5 s, and over 10 s at a load of 25): within it the agents
    # keep their replicas running; past it they fence them, rightly, and the replicas run
    # again (tests/chaos covers that)
    c = new_cluster(agents=2, lease_s=30.0, node_grace_s=40.0)
    alice = c.user("alice")
    web = alice.create_service(
        {"name": "web", "replicas": 2, "replica": {"gpus_per_worker": 1, "command": SLEEP}}
    )
    assert [r.job_id for r in web.replicas] == ["web.1", "web.2"]
    ready = wait_for("2 replicas ready", lambda: (s := alice.service("web")).ready == 2 and s, 60)
    assert all(r.state == "RUNNING" and r.node and r.port for r in ready.replicas)
    before = {r.job_id: (r.node, r.port) for r in ready.replicas}
    attempts = {j: alice.job(j).attempt for j in before}

    c.kill_controller()  # SIGKILL: nothing is flushed on the way out
    c.start_controller()
    again = wait_for(
        "ready after the restart", lambda: (s := alice.service("web")).ready == 2 and s, 60
    )
    assert {r.job_id: (r.node, r.port) for r in again.replicas} == before  # the same replicas
    assert again.generation == 1
    assert {j: alice.job(j).attempt for j in before} == attempts  # none ran again

    alice.scale_service("web", 3)
    wait_for("3 ready", lambda: alice.service("web").ready == 3, 60)
    alice.delete_service("web")
    wait_for("gone", lambda: not alice.services(), 60)
    jobs = {j.id: j.state for j in alice.jobs(all_states=True)}
    assert jobs == {"web.1": "CANCELLED", "web.2": "CANCELLED", "web.3": "CANCELLED"}
