"""Issue 26, first section, with real processes: a controller SIGKILLed and started again after
3 s, 30 s or 4 minutes, and a node whose data disk is full for a minute, kill no running job.
Every job keeps its first attempt and ends once — counted from the tasks' own records (a line
each start and each end appends to a file), not from the controller's word.

The controller's outage tolerance is 45 s for the shorter outages (``--outage-tolerance-s``: the
300 s default would only make the test wait longer, never change what it checks); the lease
stays the tests' 1.5 s, so without the tolerance every outage below would fence every task. The
4-minute outage runs at the default tolerance (300 s) with real processes (no clock can be
injected into them), and on the pure state machine with an injected clock
(tests/unit/test_agent_state_outage.py).
The disk test keeps the tests' short timings (tolerance = lease, 1.5 s): a lease that reached
the watchdog only through the full disk would fence the job within seconds.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from livehelp import wait_for, wait_state

from gpufleet.client import Client
from gpufleet.ops.localcluster import LocalCluster
from realparts import missing
from support.records import lines, shell_job

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("outage-tolerance")]

TOLERANCE_S = 45.0


def long_job(name: str, records: Path, go: Path, workers: int = 1) -> dict[str, Any]:
    """Runs until the test creates ``go``; each rank's start and end appended to ``records``."""
    line = '"$GPUFLEET_JOB_ID $GPUFLEET_ATTEMPT $RANK"'
    script = (
        f"echo start {line} >> {records}; "
        f"while [ ! -e {go} ]; do sleep 0.2; done; "
        f"echo end {line} >> {records}"
    )
    return shell_job(name, script, workers=workers)


def submit_on_every_node(c: LocalCluster, u: Client, records: Path, go: Path) -> list[str]:
    """Three jobs on the four nodes: two of one node each, a gang of two nodes."""
    ids = [
        *u.submit(long_job("one", records, go)),
        *u.submit(long_job("two", records, go)),
        *u.submit(long_job("gang", records, go, workers=2)),
    ]
    for jid in ids:
        wait_state(u, jid, "RUNNING", 60)
    want = 4  # ranks
    wait_for("every rank started", lambda: sum(lines(records).values()) >= want, 30)
    with c.admin() as a:
        busy = {n.name for n in a.nodes() if n.jobs}
    assert len(busy) == 4, busy  # several nodes, each with a job
    return ids


def nodes_of(u: Client, jid: str) -> set[str]:
    return {p.node for p in u.job(jid).placement}


def assert_each_ran_once(u: Client, ids: list[str], records: Path) -> None:
    for jid in ids:
        j = wait_state(u, jid, "SUCCEEDED", 60)
        assert j.attempt == 1, (jid, j.attempt, j.events)
        assert not any("fenced" in str(e) for e in j.events), j.events
    got = lines(records)
    ranks = {"one": 1, "two": 1, "gang": 2}
    for jid, ranks_of in zip(ids, ranks.values(), strict=True):
        for rank in range(ranks_of):
            assert got[f"start {jid} 1 {rank}"] == 1, got
            assert got[f"end {jid} 1 {rank}"] == 1, got
    assert sum(got.values()) == 2 * sum(ranks.values()), got  # no other attempt, no rerun


@pytest.mark.parametrize(
    ("outage_s", "end_during_outage", "tolerance_s"),
    # after 3 s the jobs end once it is back; after 30 s they end while it is away, and it
    # learns of their ends from the agents' registrations; after 4 minutes, at the default
    # tolerance (5 minutes), they run through the whole outage and it adopts them
    [
        (3.0, False, TOLERANCE_S),
        (30.0, True, TOLERANCE_S),
        # mostly waiting: on a worker of its own from the start (`slow` runs first), not at
        # the end of this module's chain
        pytest.param(
            240.0, False, 300.0, marks=[pytest.mark.slow, pytest.mark.xdist_group("outage-4min")]
        ),
    ],
)
def test_a_controller_restart_kills_no_running_job(
    new_cluster: Any, tmp_path: Path, outage_s: float, end_during_outage: bool, tolerance_s: float
) -> None:
    c: LocalCluster = new_cluster(
        agents=4, node_grace_s=0.0, controller_args=["--outage-tolerance-s", str(tolerance_s)]
    )
    records, go = tmp_path / "records", tmp_path / "go"
    with c.user("alice") as u:
        ids = submit_on_every_node(c, u, records, go)
        c.kill_controller()  # SIGKILL
        started = time.monotonic()
        # the agents' leases lapse meanwhile (1.5 s): their tasks run on
        wait_for("half the outage", lambda: time.monotonic() - started >= outage_s / 2, outage_s)
        assert not any(k.startswith("end") for k in lines(records))
        if end_during_outage:
            go.touch()
            ended = lambda: sum(n for k, n in lines(records).items() if k.startswith("end")) >= 4  # noqa: E731
            wait_for("every rank ended while the controller was away", ended, 15)
        wait_for("the outage", lambda: time.monotonic() - started >= outage_s, outage_s, 0.2)
        c.start_controller()
        c.wait_nodes(4)
        if not end_during_outage:
            with c.admin() as a:
                # adopted: each node registered again (the restart holds it "unhealthy:
                # waiting for its agent" until then) with its job running there
                def adopted() -> bool:
                    return all(n.jobs and n.state in ("allocated", "mixed") for n in a.nodes())

                wait_for("every node back with its job", adopted, 30)
            go.touch()
        assert_each_ran_once(u, ids, records)


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Any:
    """A 16 MiB tmpfs (the test runs as root): a node's data disk that the test fills."""
    if shutil.which("mount") is None:
        missing("no mount command")
    mounted: list[Path] = []

    def mount(path: Path) -> Path:
        path.mkdir(parents=True, exist_ok=True)
        res = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(path)],
            capture_output=True,
            text=True,
        )
        if res.returncode != 0:
            missing(f"cannot mount a tmpfs: {res.stderr.strip()}")
        mounted.append(path)
        return path

    yield mount
    for path in reversed(mounted):
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(disk: Path) -> Path:
    """Fill the filesystem to 100 %: writes until ENOSPC."""
    ballast = disk / "ballast"
    with ballast.open("wb") as f:
        chunk = b"\0" * (1 << 16)
        try:
            while True:
                f.write(chunk)
                f.flush()
        except OSError:
            pass
    return ballast


def test_a_full_data_disk_kills_nothing_and_drains_the_node_with_its_reason(
    new_cluster: Any, tmp_path: Path, small_tmpfs: Any
) -> None:
    cluster_dir = tmp_path / "cluster0"  # new_cluster's first cluster
    disk = small_tmpfs(cluster_dir / "node-1")  # node-1's --data-dir
    c: LocalCluster = new_cluster(agents=4)
    records, go = tmp_path / "records", tmp_path / "go"
    with c.user("alice") as u, c.admin() as a:
        ids = submit_on_every_node(c, u, records, go)
        on_disk = next(jid for jid in ids if "node-1" in nodes_of(u, jid))
        ballast = fill(disk)
        started = time.monotonic()

        def drained() -> Any:
            n = next(n for n in a.nodes() if n.name == "node-1")
            return n if n.state in ("drained", "unhealthy") and "disk full" in n.why else None

        node = wait_for("node-1 drained for its full disk", drained, 30)
        assert f"disk full on {disk}" in node.why, node.why
        out = subprocess.run(
            [sys.executable, "-m", "gpufleet.cli.main", "nodes", "--server", c.url],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "GPUFLEET_TOKEN": c.admin_token, "COLUMNS": "250"},
        ).stdout
        assert "disk full on" in out, out
        # no new work there meanwhile: a job that fits beside the running one and may run
        # only on node-1 stays pending
        (extra,) = u.submit(
            {
                "name": "extra",
                "nodelist": ["node-1"],
                "gpus_per_worker": 0,
                "cpus": 1,
                "memory_gib": 1,
                "command": ["true"],
            }
        )
        # full for a minute (40 leases): the job on it runs on, its first attempt
        wait_for("the disk full for 60 s", lambda: time.monotonic() - started >= 60, 65, 0.5)
        assert u.job(on_disk).state == "RUNNING" and u.job(on_disk).attempt == 1
        assert not any(k.startswith("end") for k in lines(records))
        assert u.job(extra).state == "PENDING", u.job(extra)
        ballast.unlink()  # space again: the node comes back by itself
        wait_for(
            "node-1 back in service",
            lambda: (
                next(n for n in a.nodes() if n.name == "node-1").state
                not in ("drained", "unhealthy")
            ),
            30,
        )
        wait_state(u, extra, "SUCCEEDED", 30)  # it runs there now
        go.touch()
        assert_each_ran_once(u, ids, records)


def test_an_agent_cut_off_past_the_tolerance_is_fenced_before_its_job_runs_elsewhere(
    new_cluster: Any, tmp_path: Path
) -> None:
    """A partition longer than the tolerance (the agent frozen: SIGSTOP, its watchdog awake):
    the watchdog fences the task at the tolerance's end, the controller gives the node up only
    after the tolerance, the fence grace and a margin, and the job's second attempt starts
    elsewhere after the first one's last sign of life. The tolerance is 6 s here, four leases."""
    c: LocalCluster = new_cluster(
        agents=2, node_grace_s=0.0, controller_args=["--outage-tolerance-s", "6"]
    )
    records, go = tmp_path / "records", tmp_path / "go"
    spec = long_job("cut-off", records, go)
    spec["command"][-1] = (
        f'echo start "$GPUFLEET_JOB_ID $GPUFLEET_ATTEMPT" >> {records}; '
        f"while [ ! -e {go} ]; do "
        f'echo alive "$GPUFLEET_JOB_ID $GPUFLEET_ATTEMPT" >> {records}; sleep 0.1; done'
    )
    with c.user("alice") as u:
        (jid,) = u.submit(spec)
        wait_state(u, jid, "RUNNING", 60)
        wait_for("it runs", lambda: lines(records)[f"alive {jid} 1"] >= 3, 30)
        (node,) = nodes_of(u, jid)
        c.kill_agent(node, signal.SIGSTOP)
        try:
            # past the lease (1.5 s) it still runs: only the tolerance fences it
            n_before = lines(records)[f"alive {jid} 1"]
            wait_for("3 s cut off", lambda: lines(records)[f"alive {jid} 1"] >= n_before + 20, 10)
            assert u.job(jid).attempt == 1

            def second() -> bool:
                return lines(records)[f"start {jid} 2"] == 1

            wait_for("attempt 2 started elsewhere", second, 40)
        finally:
            c.kill_agent(node, signal.SIGCONT)
        order = records.read_text().splitlines()
        assert f"alive {jid} 1" not in order[order.index(f"start {jid} 2") :], order
        assert nodes_of(u, jid) != {node}
        go.touch()
        j = wait_state(u, jid, "SUCCEEDED", 60)
        assert j.attempt == 2 and j.retries_used == 0, j


def test_an_agent_frozen_within_the_tolerance_costs_its_job_nothing(
    new_cluster: Any, tmp_path: Path
) -> None:
    """An agent SIGSTOPped for several leases but less than the tolerance (a hung agent, a
    paused VM), then SIGCONTed: its task runs on all along, the controller never gives the node
    up, and the job ends with its first attempt, started once."""
    c: LocalCluster = new_cluster(
        agents=2, node_grace_s=0.0, controller_args=["--outage-tolerance-s", str(TOLERANCE_S)]
    )
    records, go = tmp_path / "records", tmp_path / "go"
    spec = long_job("frozen-agent", records, go)
    spec["command"][-1] = (
        f'echo start "$GPUFLEET_JOB_ID $GPUFLEET_ATTEMPT" >> {records}; '
        f"while [ ! -e {go} ]; do "
        f'echo alive "$GPUFLEET_JOB_ID $GPUFLEET_ATTEMPT" >> {records}; sleep 0.1; done; '
        f'echo end "$GPUFLEET_JOB_ID $GPUFLEET_ATTEMPT" >> {records}'
    )
    with c.user("alice") as u, c.admin() as a:
        (jid,) = u.submit(spec)
        wait_state(u, jid, "RUNNING", 60)
        wait_for("it runs", lambda: lines(records)[f"alive {jid} 1"] >= 3, 30)
        (node,) = nodes_of(u, jid)
        c.kill_agent(node, signal.SIGSTOP)
        try:
            # the task writes on while its agent is frozen: 40 lines are 4 s, over two leases
            n_before = lines(records)[f"alive {jid} 1"]
            wait_for("4 s frozen", lambda: lines(records)[f"alive {jid} 1"] >= n_before + 40, 20)
        finally:
            c.kill_agent(node, signal.SIGCONT)
        wait_for(
            "the node back", lambda: {n.state for n in a.nodes() if n.name == node} != {"lost"}, 30
        )
        go.touch()
        j = wait_state(u, jid, "SUCCEEDED", 60)
        assert j.attempt == 1 and j.retries_used == 0, j
        assert lines(records)[f"start {jid} 1"] == 1 and lines(records)[f"end {jid} 1"] == 1
        assert not [s for s in lines(records) if s.startswith(f"start {jid} 2")]
        assert not [n.name for n in a.nodes() if n.state == "lost"]
