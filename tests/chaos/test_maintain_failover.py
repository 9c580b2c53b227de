"""Rolling maintenance across a leader's death (issue 26, ADR 0041), real processes: two
``gpufleet controller --ha`` on one PostgreSQL database, agents given both addresses. The leader
is SIGKILLed while a batch's node drains under a running job; the standby that takes over
reads the rollout back and carries it to its end: the job finishes once, on its first attempt,
and the command runs once on each node (the nodes' own records)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_ha_failover import job, lines, wait_state

from gpufleet.ops.hacluster import HaCluster
from gpufleet.ops.localcluster import wait_until

pytestmark = [pytest.mark.chaos, pytest.mark.requires("postgres")]


def test_a_rollout_goes_on_under_the_new_leader_and_nothing_runs_twice(
    ha_cluster: Any, tmp_path: Path
) -> None:
    c: HaCluster = ha_cluster()
    records, go, ran = tmp_path / "records", tmp_path / "go", tmp_path / "ran"
    old = c.wait_leader()
    with c.user("alice") as u, c.admin() as a:
        (jid,) = u.submit(job("long", records, go))
        wait_state(u, jid, "RUNNING")
        busy = u.job(jid).placement[0].node
        other = next(n for n in ("node-0", "node-1") if n != busy)
        m = a.start_maintenance(
            {"nodes": f"{busy},{other}", "batch": "1", "run": f"echo ran >> {ran}"}
        )
        wait_until("draining", lambda: a.maintenance(m.id).nodes[0].phase == "draining", 60)
        c.kill_one(old)  # SIGKILL, mid-drain
        c.wait_leader(other_than=old)
        go.touch()
        wait_until("the rollout done", lambda: a.maintenance(m.id).state == "done", 120)
        wait_state(u, jid, "SUCCEEDED")
        j = u.job(jid)
        assert j.attempt == 1 and j.retries_used == 0, j
        got = lines(records)
        assert got[f"start {jid} 1"] == got[f"end {jid} 1"] == 1, got
        assert ran.read_text() == "ran\nran\n"  # once per node, across the failover
        assert {n.name: n.state for n in a.nodes()} == {"node-0": "idle", "node-1": "idle"}
