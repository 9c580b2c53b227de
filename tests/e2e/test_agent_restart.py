"""Issue 26, first section, with real processes: an agent process that dies (SIGKILL, as an OOM
kill or a crashed upgrade does) costs its running tasks nothing. They belong to the node's
watchdog (each led by its keeper, not the agent's child); the agent started again with the same
arguments adopts them (pids, logs, and exit statuses when they end), and the controller keeps
their jobs on their first attempt. A reboot (another boot id, faked here with
``--boot-id-file``, the watchdog and the tasks killed) is known at once: the jobs are requeued
without waiting for the outage tolerance, and none runs twice. Counted from the tasks' own
records (a line each start, life sign and end appends to a file), not the controller's word.

The tolerance is 45 s (``--outage-tolerance-s``); the lease the tests' 1.5 s, so the agent is
away for many leases: its tasks live on the tolerance alone.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from pathlib import Path
from typing import Any

import psutil
import pytest
from livehelp import wait_for, wait_state

from gpufleet.client import Client
from gpufleet.ops.localcluster import LocalCluster
from support.records import lines, shell_job

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("agent-restart")]

TOLERANCE_S = 45.0


def job(name: str, records: Path, go: Path, code: int = 0) -> dict[str, Any]:
    """Writes ``alive`` lines (and a line to its stdout) until ``go`` exists, then exits
    with ``code``."""
    me = '"$GPUFLEET_JOB_ID $GPUFLEET_ATTEMPT"'
    script = (
        f"echo start {me} >> {records}; echo hello from before; "
        f"while [ ! -e {go} ]; do echo alive {me} >> {records}; sleep 0.1; done; "
        f"echo end {me} >> {records}; echo goodbye; exit {code}"
    )
    return shell_job(name, script)


def node_of(u: Client, jid: str) -> str:
    (node,) = {p.node for p in u.job(jid).placement}
    return node


def running(u: Client, jid: str, records: Path) -> str:
    wait_state(u, jid, "RUNNING", 60)
    wait_for("it runs", lambda: lines(records)[f"alive {jid} 1"] >= 3, 30)
    return node_of(u, jid)


def lives_on(records: Path, jid: str, more: int = 10) -> None:
    """Its task writes on: ``more`` life signs from now."""
    n = lines(records)[f"alive {jid} 1"]
    wait_for("the task living on", lambda: lines(records)[f"alive {jid} 1"] >= n + more, 20)


def registrations(c: LocalCluster, node: str) -> int:
    """How often the node's agents registered (their log, appended by each)."""
    return (c.data_dir / f"{node}.log").read_text().count(f"registered {node}:")


def test_an_agent_killed_and_started_again_adopts_its_running_and_ended_tasks(
    new_cluster: Any, tmp_path: Path
) -> None:
    c: LocalCluster = new_cluster(
        agents=2, node_grace_s=0.0, controller_args=["--outage-tolerance-s", str(TOLERANCE_S)]
    )
    records = tmp_path / "records"
    go_on, go_off = tmp_path / "go-on", tmp_path / "go-off"
    with c.user("alice") as u:
        (on,) = u.submit(job("runs-on", records, go_on))
        (off,) = u.submit(job("ends-meanwhile", records, go_off, code=3))
        nodes = {running(u, on, records): on, running(u, off, records): off}
        assert len(nodes) == 2, nodes
        before = {node: registrations(c, node) for node in nodes}
        for node in nodes:
            c.kill_agent(node)  # SIGKILL: no clean stop, no word to its watchdog
        for jid in nodes.values():
            lives_on(records, jid)  # many leases without an agent
        go_off.touch()  # one ends while no agent runs: its keeper keeps the status
        wait_for("it ended", lambda: lines(records)[f"end {off} 1"] == 1, 20)
        for node in nodes:
            c.start_agent(int(node.split("-")[1]))  # the same arguments, the same data dir
        for node, n in before.items():
            wait_for(f"{node} registered again", lambda: registrations(c, node) > n, 30)  # noqa: B023
            one = lambda: len(watchdog_of(c.data_dir / node)) == 1  # noqa: B023, E731
            wait_for(f"the dead agent's watchdog on {node} gone, the new one's alone", one, 10)
        j = wait_state(u, off, "FAILED", 30)  # the status its keeper recorded: code 3
        assert j.attempt == 1 and j.retries_used == 0, j
        assert any("code 3" in e.why for e in j.events or []), j.events
        assert u.job(on).state == "RUNNING" and u.job(on).attempt == 1
        lives_on(records, on)
        go_on.touch()
        j = wait_state(u, on, "SUCCEEDED", 30)
        assert j.attempt == 1 and j.retries_used == 0, j
        for jid in (on, off):
            assert not any("fenced" in e.why for e in u.job(jid).events or []), jid
        got = lines(records)
        assert got[f"start {on} 1"] == got[f"end {on} 1"] == 1, got
        assert got[f"start {off} 1"] == got[f"end {off} 1"] == 1, got
        assert not [k for k in got if k.split()[-1] != "1"], got  # no second attempt at all

        def logs_whole() -> bool:
            data = u.logs(on).data
            return "hello from before" in data and "goodbye" in data

        wait_for("its log, before and after the restart", logs_whole, 20)


def test_an_agent_restarted_for_an_upgrade_leaves_its_task_running_for_the_next(
    new_cluster: Any, tmp_path: Path
) -> None:
    """SIGHUP: the agent exits (0) for a restart, as an upgrade does; its task runs on and the
    agent started again (the new version) adopts it. One attempt, one start, one end."""
    c: LocalCluster = new_cluster(
        agents=1, node_grace_s=0.0, controller_args=["--outage-tolerance-s", str(TOLERANCE_S)]
    )
    records, go = tmp_path / "records", tmp_path / "go"
    with c.user("alice") as u:
        (jid,) = u.submit(job("upgraded-under", records, go))
        node = running(u, jid, records)
        before = registrations(c, node)
        old = c.agent_procs[node].proc
        c.kill_agent(node, signal.SIGHUP)
        assert old.wait(timeout=30) == 0  # a clean exit, its task left to the node
        lives_on(records, jid)
        c.start_agent(int(node.split("-")[1]))
        wait_for("registered again", lambda: registrations(c, node) > before, 30)
        lives_on(records, jid)
        assert "adopted 1 task(s)" in (c.data_dir / f"{node}.log").read_text()
        go.touch()
        j = wait_state(u, jid, "SUCCEEDED", 30)
        assert j.attempt == 1 and j.retries_used == 0, j
        got = lines(records)
        assert got[f"start {jid} 1"] == got[f"end {jid} 1"] == 1, got


def watchdog_of(data_dir: Path) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = p.info["cmdline"] or []
        if any(a.endswith("watchdog.py") for a in cmd) and str(data_dir) in cmd:
            found.append(p)
    return found


def kill_the_node(data_dir: Path) -> None:
    """What a reboot does to the agent's children: its watchdog and every task gone."""
    for p in watchdog_of(data_dir):
        p.kill()
    for pidfile in data_dir.glob("*/*/rank*.pid"):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(json.loads(pidfile.read_text())["pid"], signal.SIGKILL)


def test_a_rebooted_node_gets_its_jobs_requeued_at_once_and_none_runs_twice(
    new_cluster: Any, tmp_path: Path
) -> None:
    c: LocalCluster = new_cluster(
        agents=2, node_grace_s=0.0, controller_args=["--outage-tolerance-s", str(TOLERANCE_S)]
    )
    records, go = tmp_path / "records", tmp_path / "go"
    other_boot = tmp_path / "boot_id"
    other_boot.write_text("00000000-0000-4000-8000-000000000000\n")
    with c.user("alice") as u, c.admin() as a:
        (jid,) = u.submit(job("rebooted", records, go))
        node = running(u, jid, records)
        c.kill_agent(node)
        kill_the_node(c.data_dir / node)
        wait_for("the task gone", lambda: not watchdog_of(c.data_dir / node), 10)
        c.start_agent(int(node.split("-")[1]), "--boot-id-file", str(other_boot))

        def again() -> int | None:
            j = u.job(jid)
            return j.attempt if j.attempt >= 2 and j.state == "RUNNING" else None

        # a later attempt runs (2, or 3 where the first requeue's launch reached the node
        # before it registered again and was dropped with its stale commands: never started)
        k = wait_for("a later attempt running", again, 60)
        # requeued for the reboot the new agent told (its fast path), not for the node's
        # silence outlasting the tolerance: a state the job's history says, not a time
        ends = [e.why for e in u.job(jid).events or [] if e.attempt == 1 and e.state != "RUNNING"]
        assert any("rebooted" in why for why in ends), ends
        assert not [x.name for x in a.nodes() if x.state == "lost"]
        wait_for(f"attempt {k} runs", lambda: lines(records)[f"alive {jid} {k}"] >= 3, 30)
        order = records.read_text().splitlines()
        assert f"alive {jid} 1" not in order[order.index(f"start {jid} {k}") :], order
        go.touch()
        j = wait_state(u, jid, "SUCCEEDED", 60)
        assert j.attempt == k and j.retries_used == 0, j  # the node's fault: not charged
        starts = [line for line in order if line.startswith(f"start {jid} ")]
        assert starts == [f"start {jid} 1", f"start {jid} {k}"], starts  # each once, no other
