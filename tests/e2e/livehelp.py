"""Helpers for the end-to-end tests: bounded polling of real processes, the cluster's
settings, what to show when a test fails."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx

from gpufleet.api.schemas import JobOut
from gpufleet.client import Client
from gpufleet.ops.localcluster import LocalCluster
from support import waiting

T = TypeVar("T")
TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED", "TIMED_OUT"}

# Short intervals keep each test quick. Fencing needs lease + the agent's fence grace (2 s) <
# node grace: a node we declare lost has stopped its tasks before they restart elsewhere.
HEARTBEAT_S = 0.5
LEASE_S = 1.5
NODE_GRACE_S = 4.0
SCHEDULE_S = 0.5


# a process restarting or still starting: its connection errors mean "not yet"
LIVE_ERRORS = (OSError, httpx.HTTPError, httpx.StreamError)


def wait_for(what: str, check: Callable[[], T | None], timeout_s: float, every_s: float = 0.2) -> T:
    """``support.waiting.wait_for`` for real processes: connection errors count as "not yet"."""
    return waiting.wait_for(what, check, timeout_s, every_s, ignoring=LIVE_ERRORS)


def wait_state(c: Client, job_id: str, states: set[str] | str, timeout_s: float = 30) -> JobOut:
    want = {states} if isinstance(states, str) else states

    def check() -> JobOut | None:
        j = c.job(job_id)
        if j.state in want:
            return j
        if j.state in TERMINAL:
            raise AssertionError(f"job {job_id} ended {j.state}, wanted {want}: {j.events}")
        return None

    return wait_for(f"job {job_id} in {sorted(want)}", check, timeout_s)


def read_log(c: Client, job_id: str, rank: int = 0, timeout_s: float = 20) -> str:
    """The whole stdout of a rank of a job that ended, once the agent shipped all of it."""

    def check() -> str | None:
        out = c.logs(job_id, rank=rank)
        data = out.data
        nxt = out.next_offset
        while True:  # more than one page
            more = c.logs(job_id, rank=rank, offset=nxt)
            if not more.data:
                break
            data += more.data
            nxt = more.next_offset
        return data if data and out.complete else None

    return wait_for(f"job {job_id} rank {rank} log", check, timeout_s)


def tail(path: Path, n: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(none)"


def dump_logs(c: LocalCluster) -> None:
    """Shown with a failure: what the controller and the agents said last."""
    print(f"\n--- {c.data_dir / 'controller.log'}\n{tail(c.data_dir / 'controller.log')}")
    for name in c.agent_procs:
        print(f"--- {c.data_dir / (name + '.log')}\n{tail(c.data_dir / (name + '.log'), 15)}")


def make_cluster(data_dir: Path, agents: int, db_url: str = "", **kw: Any) -> LocalCluster:
    """A cluster with the tests' timings; ``kw`` adds to them or overrides them."""
    timings: dict[str, Any] = {
        "gpus": "8xH100",
        "heartbeat_s": HEARTBEAT_S,
        "node_grace_s": NODE_GRACE_S,
        "lease_s": LEASE_S,
        "schedule_interval_s": SCHEDULE_S,
    }
    return LocalCluster(data_dir, agents=agents, db_url=db_url, **{**timings, **kw})
