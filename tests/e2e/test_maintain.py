"""Issue 26, rolling maintenance with real processes (a local cluster of 4 simulated 8-GPU nodes):
nodes go out in batches, each drained until its jobs end, the command run on it through its
agent, validated on the node, and returned; a running job is left to finish, once. A failed
command stops the rollout, leaves its node drained with the reason and rolls it back. The
canary waits for a confirmation across a controller restart (the controller drives the rollout,
from the store). An agent upgrade restarts each agent under a running job, which finishes once,
on its first attempt, as its own records say."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from livehelp import wait_for, wait_state

from gpufleet.ops.localcluster import LocalCluster
from support.records import lines, shell_job

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("maintain")]


def long_job(name: str, records: Path, go: Path) -> dict[str, Any]:
    me = '"$GPUFLEET_JOB_ID $GPUFLEET_ATTEMPT"'
    script = (
        f"echo start {me} >> {records}; while [ ! -e {go} ]; do sleep 0.1; done; "
        f"echo end {me} >> {records}"
    )
    return shell_job(name, script)


def phases(a: Any, mid: str) -> dict[str, str]:
    return {n.node: n.phase for n in a.maintenance(mid).nodes}


def ended(a: Any, mid: str, timeout_s: float = 90) -> Any:
    return wait_for(
        f"maintenance {mid} ended",
        lambda: m if (m := a.maintenance(mid)).state in ("done", "failed", "cancelled") else None,
        timeout_s,
    )


def history(a: Any, node: str) -> list[tuple[str, str]]:
    events = a.http.get(f"/api/v1/nodes/{node}/history").json()["events"]
    return [(e["what"], e["why"]) for e in events]


def cli(c: LocalCluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpufleet.cli.main", *args, "--server", c.url,
         "--token-file", str(c.admin_token_file)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_batches_drain_run_validate_and_return_leaving_a_running_job_to_finish_once(
    new_cluster: Any, tmp_path: Path
) -> None:
    c: LocalCluster = new_cluster(agents=4)
    ran, records, go = tmp_path / "ran", tmp_path / "records", tmp_path / "go"
    with c.user("alice") as u, c.admin() as a:
        (jid,) = u.submit(long_job("busy", records, go))
        j = wait_state(u, jid, "RUNNING", 60)
        busy = j.placement[0].node
        order = [busy, *sorted(n for n in ("node-0", "node-1", "node-2", "node-3") if n != busy)]
        m = a.start_maintenance(
            {"nodes": ",".join(order), "batch": "2", "run": f"echo ran >> {ran}",
             "validate_layers": ["device", "network"]}
        )  # fmt: skip
        assert m.batches == 2
        wait_for("the second node of batch 1 done", lambda: phases(a, m.id)[order[1]] == "done", 60)
        assert phases(a, m.id)[busy] == "draining"  # its job runs on: nothing is run there yet
        assert phases(a, m.id)[order[2]] == "pending"  # the batch has not settled
        go.touch()
        done = ended(a, m.id)
        assert done.state == "done", done
        j = wait_state(u, jid, "SUCCEEDED", 30)
        assert j.attempt == 1
        got = lines(records)
        assert got[f"start {jid} 1"] == got[f"end {jid} 1"] == 1, got
        assert ran.read_text() == "ran\n" * 4  # once per node
        assert all(n.state == "idle" for n in a.nodes()), [(n.name, n.state) for n in a.nodes()]
        whats = [w for w, _ in history(a, busy)]
        assert whats.count("drained") == 1 and whats.count("resumed") == 1
        assert any("validating" in why for w, why in history(a, busy) if w == "maintenance")
        assert any(e.action == "maintenance.create" for e in a.audit(500))
        v = a.node_command(f"{m.id}.0.validate")  # gpufleet validate's layers, on the node
        assert "--net-rank 0" in v.command and v.exit_code == 0, v
        for check in ("device", "network interface up", "network bandwidth", "network latency"):
            assert check in v.output, (check, v.output)
        peer = a.node_command(f"{m.id}.0.validate.peer")  # a healthy node of the next batch
        assert peer.node in order[2:] and peer.exit_code == 0, peer
        out = cli(c, "maintain", "status", m.id)
        assert out.returncode == 0 and "batch 2/2 [####################] 2/2" in out.stdout, out


def test_a_failed_command_stops_the_rollout_and_rolls_its_node_back_left_drained(
    new_cluster: Any, tmp_path: Path
) -> None:
    c: LocalCluster = new_cluster(agents=3)
    rolled = tmp_path / "rolled-back"
    back = f"echo back >> {rolled}"
    res = cli(c, "maintain", "--nodes", "node-[0-2]", "--batch", "1",
              "--run", "echo broken >&2; exit 3", "--rollback", back)  # fmt: skip
    assert res.returncode == 1, res
    assert "run failed: exit 3" in res.stdout and "failed" in res.stdout, res.stdout
    with c.admin() as a:
        (m,) = a.maintenances()
        assert m.state == "failed" and m.failures == 1
        assert phases(a, m.id) == {
            "node-0": "rolled back",
            "node-1": "pending",
            "node-2": "pending",
        }
        n0 = next(n for n in a.nodes() if n.name == "node-0")
        assert n0.state == "drained" and "run failed: exit 3" in n0.why, n0
        assert rolled.read_text() == "back\n"
        assert {n.state for n in a.nodes() if n.name != "node-0"} == {"idle"}


def test_the_canary_awaits_its_confirmation_across_a_controller_restart(
    new_cluster: Any, tmp_path: Path
) -> None:
    c: LocalCluster = new_cluster(agents=3)
    ran = tmp_path / "ran"
    with c.admin() as a:
        m = a.start_maintenance(
            {"nodes": "node-[0-2]", "batch": "2", "canary": 1, "run": f"echo ran >> {ran}"}
        )
        wait_for(
            "the canary done", lambda: a.maintenance(m.id).state == "awaiting confirmation", 60
        )
    c.kill_controller(signal.SIGKILL)
    c.start_controller()
    c.wait_nodes(3)
    with c.admin() as a:
        assert a.maintenance(m.id).state == "awaiting confirmation"
        assert ran.read_text() == "ran\n"  # the canary alone
        res = cli(c, "maintain", "confirm", m.id, "--follow")
        assert res.returncode == 0, res
        assert ended(a, m.id).state == "done"
        assert ran.read_text() == "ran\n" * 3  # nothing run twice across the restart


def test_an_agent_upgrade_restarts_each_agent_under_its_running_job_which_ends_once(
    new_cluster: Any, tmp_path: Path
) -> None:
    c: LocalCluster = new_cluster(
        agents=2, node_grace_s=0.0, controller_args=["--outage-tolerance-s", "45"]
    )
    records, go = tmp_path / "records", tmp_path / "go"
    pids = {n: p.proc.pid for n, p in c.agent_procs.items()}
    with c.user("alice") as u, c.admin() as a:
        (jid,) = u.submit(long_job("under-upgrade", records, go))
        node = wait_state(u, jid, "RUNNING", 60).placement[0].node
        wait_for("it started", lambda: lines(records)[f"start {jid} 1"] == 1, 30)
        # the new release's install: its own path (here a launcher of this interpreter)
        new = tmp_path / "gpufleet-2.0" / "bin" / "python"
        new.parent.mkdir(parents=True)
        new.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
        new.chmod(0o755)
        m = a.start_maintenance(
            {"nodes": "node-[0-1]", "batch": "1", "agent_upgrade": True, "python": str(new)}
        )
        assert ended(a, m.id, 120).state == "done", a.maintenance(m.id)
        log = (c.data_dir / f"{node}.log").read_text()
        assert f"restarting for an upgrade ({new})" in log and "adopted 1 task(s)" in log
        for n in c.agent_procs:
            cmd = a.node_command(f"{m.id}.{int(n.split('-')[1])}.restart")
            assert cmd.state == "done" and str(new) in cmd.why, cmd
        assert {n: p.proc.pid for n, p in c.agent_procs.items()} == pids  # re-executed in place
        assert all(p.proc.poll() is None for p in c.agent_procs.values())
        assert u.job(jid).state == "RUNNING" and u.job(jid).attempt == 1
        go.touch()
        j = wait_state(u, jid, "SUCCEEDED", 30)
        assert j.attempt == 1 and j.retries_used == 0, j
        got = lines(records)
        assert got[f"start {jid} 1"] == got[f"end {jid} 1"] == 1, got
        assert not [k for k in got if k.split()[-1] != "1"], got


def test_a_node_whose_gpu_fails_after_the_command_fails_validation_and_stays_drained(
    new_cluster: Any, tmp_path: Path
) -> None:
    """The command breaks a GPU (an XID injected into the simulated GPUs, read at the agent's
    next sample): the node's own health, part of the validation, fails it."""
    c: LocalCluster = new_cluster(agents=2)
    inbox = c.data_dir / "node-0" / "inject"
    rolled = tmp_path / "rolled"
    # the heartbeats that report the fault come within the command's last seconds
    run = f"echo xid79@gpu0 > {inbox}.tmp && mv {inbox}.tmp {inbox} && sleep 3"
    with c.admin() as a:
        m = a.start_maintenance(
            {"nodes": "node-[0-1]", "batch": "1", "run": run, "validate_layers": ["device"],
             "rollback": f"echo back >> {rolled}"}
        )  # fmt: skip
        m = ended(a, m.id)
        assert m.state == "failed" and m.failures == 1, m
        (n0,) = [n for n in m.nodes if n.node == "node-0"]
        assert n0.phase == "rolled back" and "validate failed" in n0.why and "unhealthy" in n0.why
        node = next(n for n in a.nodes() if n.name == "node-0")
        assert node.state != "idle" and "maintenance" in node.why, node
        assert rolled.read_text() == "back\n"
        assert phases(a, m.id)["node-1"] == "pending"
