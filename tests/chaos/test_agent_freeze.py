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
from itertools import pairwise
from pathlib import Path

import pytest

from bench.agent_freeze import WRITER, lines
from gpufleet.client import Client
from gpufleet.ops.localcluster import LocalCluster, wait_until

pytestmark = pytest.mark.chaos
RUNS = 3


def writing(c: Client, job: str, out: Path, after: int = 0) -> tuple[int, str] | None:
    """The job's attempt (later than ``after``) and node, once that attempt runs and writes.

    Any attempt, not only the first: on a loaded machine a 1.5 s lease can lapse before the
    test breaks anything, and the node's watchdog then rightly fences attempt 1 itself."""
    j = c.job(job)
    if j.state == "RUNNING" and j.attempt > after and j.placement and j.attempt in lines(out):
        return j.attempt, j.placement[0].node
    return None


def assert_one_at_a_time(by: dict[int, list[float]], run: int) -> None:
    """Each attempt's last line is earlier than the next attempt's first."""
    for old, new in pairwise(sorted(by)):
        assert max(by[old]) < min(by[new]), (
            f"run {run}: attempt {old} wrote until {max(by[old]):.3f}, after attempt {new} "
            f"began at {min(by[new]):.3f}: the job ran on two nodes at once"
        )


def break_and_check(c: LocalCluster, u: Client, out: Path, sig: int, run: int) -> None:
    (job,) = u.submit(
        {
            "name": f"alive-{run}",
            "gpus_per_worker": 8,
            "command": [sys.executable, "-c", WRITER, str(out)],
        }
    )
    seen: list[tuple[int, str]] = []

    def seen_writing(after: int = 0) -> bool:
        now = writing(u, job, out, after)
        seen.extend([now] if now else [])
        return now is not None

    wait_until("an attempt running and writing", seen_writing, 60)
    attempt, node = seen[-1]
    c.kill_agent(node, sig)
    try:
        wait_until(
            "a later attempt running elsewhere and writing",
            lambda: seen_writing(after=attempt),
            90,
        )
        time.sleep(0.5)  # let a surviving old attempt show itself, if there is one
    finally:
        if sig == signal.SIGSTOP:
            c.kill_agent(node, signal.SIGCONT)
    assert seen[-1][1] != node
    assert_one_at_a_time(lines(out), run)
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
