"""Helpers for the end-to-end tests: bounded polling of real processes, the cluster's
settings, what to show when a test fails."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import httpx

from gpufleet.api.schemas import JobOut, TokenCreate
from gpufleet.client import Client
from gpufleet.ops.localcluster import LocalCluster
from gpufleet.shims.install import install
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


def shim_env(c: LocalCluster, base: Path) -> dict[str, str]:
    """The environment a Slurm user's shell has against ``c``: the shims installed in
    ``base/bin`` first on PATH, the cluster's admin token by file (never in the environment),
    no config file, and ``base/submit`` as the working directory (``PWD``: sbatch's submit
    directory, where slurm-%j.out goes)."""
    bindir = base / "bin"
    install(bindir)
    env = dict(os.environ)
    env.update(
        PATH=f"{bindir}{os.pathsep}{env.get('PATH', '')}",
        GPUFLEET_SERVER=c.url,
        GPUFLEET_TOKEN_FILE=str(c.admin_token_file),
        GPUFLEET_CONFIG=str(base / "none.yaml"),
    )
    env.pop("GPUFLEET_TOKEN", None)
    submit = base / "submit"
    submit.mkdir()
    env["PWD"] = str(submit)
    return env


def dump_logs(c: LocalCluster) -> None:
    """Shown with a failure: what the controller and the agents said last."""
    print(f"\n--- {c.data_dir / 'controller.log'}\n{tail(c.data_dir / 'controller.log')}")
    for name in c.agent_procs:
        print(f"--- {c.data_dir / (name + '.log')}\n{tail(c.data_dir / (name + '.log'), 15)}")


def dump_service(c: LocalCluster, name: str) -> None:
    """Shown with a failure: the service's replicas and its events, as the controller holds
    them (why a replica failed, on which port, when the next one came)."""
    try:
        with c.admin() as admin:
            s = admin.service(name)
    except Exception as e:  # the controller may be the failure
        print(f"--- service {name}: not read ({type(e).__name__}: {e})")
        return
    print(f"--- service {name}: {s.ready} ready of {s.desired}")
    for r in s.replicas:
        print(f"  {r.job_id} {r.state} {r.node}:{r.port} ready={r.ready} routed={r.routed}")
    for e in s.events or []:
        print(f"  {e.time:.2f} {e.what}: {e.why}")


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


@contextmanager
def shim_cluster(
    base: Path, agents: int, **kw: Any
) -> Iterator[tuple[LocalCluster, dict[str, str]]]:
    """A started cluster of ``agents`` under ``base`` (``kw``: ``make_cluster``'s) and the
    environment its Slurm shims run in (``shim_env``); its logs shown when the test fails,
    stopped on the way out."""
    c = make_cluster(base / "cluster", agents, **kw).start()
    env = shim_env(c, base)
    try:
        yield c, env
    except BaseException:
        dump_logs(c)
        raise
    finally:
        c.stop()


@contextmanager
def user_shims(base: Path, agents: int, user: str, queues: str) -> Iterator[dict[str, str]]:
    """``shim_cluster``'s environment with ``agents`` nodes of 4 GPUs, ``queues`` (a
    queues.yaml), and a token of ``user``'s (a user with no Unix account: gpufleet never runs
    a job as root), as that user runs the shims."""
    (base / "queues.yaml").write_text(queues)
    with shim_cluster(base, agents, gpus="4xH100", queues_file=base / "queues.yaml") as (c, env):
        with c.admin() as a:
            tok = a.create_token(TokenCreate(name=user, role="user", user=user))
        (base / "token").write_text(tok.token)
        (base / "token").chmod(0o600)
        env.update(GPUFLEET_TOKEN_FILE=str(base / "token"), USER=user, LOGNAME=user)
        yield env


@contextmanager
def headless_chromium(executable: str | Path, args: list[str]) -> Iterator[Any]:
    """Playwright's Chromium at ``executable``, headless, closed on the way out."""
    from playwright import sync_api

    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=executable, headless=True, args=args)
        try:
            yield b
        finally:
            b.close()


def keep_screenshots(*paths: Path) -> None:
    """Copy the screenshots to ``$GPUFLEET_SCREENSHOTS`` when it is set."""
    keep = os.environ.get("GPUFLEET_SCREENSHOTS")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        for path in paths:
            shutil.copy(path, Path(keep) / path.name)
