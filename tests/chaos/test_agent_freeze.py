"""A hung or killed agent never lets its job run on two nodes at once (issue 10).

A job appends ``alive <attempt> <time>`` to a file every 50 ms. Its agent is frozen (SIGSTOP)
or killed (SIGKILL); the controller declares the node lost and starts the job elsewhere. The
old attempt's last line must be earlier than the new attempt's first: the node's watchdog (its
own process, which a SIGSTOP of the agent does not freeze) killed the old attempt when the
lease lapsed, and the controller waited past lease + fence grace + kill margin. Repeated a few
times, since a race shows only now and then."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

import pytest

from bench.agent_freeze import WRITER, lines
from gpufleet.client import Client
from gpufleet.ops.localcluster import LocalCluster, wait_until

pytestmark = pytest.mark.chaos
RUNS = 3


def running(c: Client, job: str, attempt: int) -> str | None:
    j = c.job(job)
    if j.state == "RUNNING" and j.attempt == attempt and j.placement:
        return j.placement[0].node
    return None


def break_and_check(c: LocalCluster, u: Client, out: Path, sig: int, run: int) -> None:
    (job,) = u.submit(
        {
            "name": f"alive-{run}",
            "gpus_per_worker": 8,
            "command": [sys.executable, "-c", WRITER, str(out)],
        }
    )
    wait_until("the job running", lambda: running(u, job, 1), 60)
    wait_until("attempt 1 writing", lambda: 1 in lines(out), 30)
    node = running(u, job, 1)
    assert node is not None
    c.kill_agent(node, sig)
    try:
        wait_until("attempt 2 running elsewhere", lambda: running(u, job, 2), 60)
        wait_until("attempt 2 writing", lambda: 2 in lines(out), 30)
        time.sleep(0.5)  # let a surviving old attempt show itself, if there is one
    finally:
        if sig == signal.SIGSTOP:
            c.kill_agent(node, signal.SIGCONT)
    new_node = running(u, job, 2)
    assert new_node is not None and new_node != node
    by = lines(out)
    assert max(by[1]) < min(by[2]), (
        f"run {run}: attempt 1 wrote until {max(by[1]):.3f}, after attempt 2 began at "
        f"{min(by[2]):.3f}: the job ran on two nodes at once"
    )
    j = u.job(job)
    assert j.retries_used == 0  # the node's fault, not the job's
    u.cancel(job)
    wait_until("the job cancelled", lambda: u.job(job).state == "CANCELLED", 30)
    if sig == signal.SIGKILL:
        c.start_agent(int(node.split("-")[1]))
    c.wait_nodes(len(c.agent_procs))


def assert_nothing_held(c: LocalCluster) -> None:
    with c.admin() as a:

        def idle() -> bool:
            busy = [j.id for j in a.jobs(all_states=True) if j.state in ("STARTING", "RUNNING")]
            nodes = a.nodes()
            return not busy and all(n.gpus_free == n.gpus for n in nodes if n.state != "lost")

        wait_until("no job STARTING or RUNNING, no GPU held", idle, 30)


@pytest.mark.parametrize("sig", [signal.SIGSTOP, signal.SIGKILL], ids=["sigstop", "sigkill"])
def test_the_old_attempt_is_dead_before_the_new_one_starts(
    chaos_cluster: object, tmp_path: Path, sig: int
) -> None:
    c: LocalCluster = chaos_cluster(agents=3)  # type: ignore[operator]
    with c.user("alice") as u:
        for run in range(RUNS):
            break_and_check(c, u, tmp_path / f"alive-{run}.txt", sig, run)
    assert_nothing_held(c)
