"""A real Slurm 22.05 on loopback for differential tests (``shared/tools/slurm_local.sh``).

One pool of them per pytest worker (tests/conftest.py): the tests that take Slurm as it is set
up (four nodes, no extra configuration) share one Slurm, every job of an earlier module's
cancelled and ended before the next module gets it (the ``shared_slurm`` fixture,
``SlurmPool.shared``), all on one worker (``--dist loadgroup``, group ``slurm-local``); a test
that needs another shape, or a Slurm that has never run a job (a record of ``squeue -t all``),
gets a new one of its own (the ``slurms`` fixture, ``SlurmPool.own``), those tests all on one
worker too (group ``slurm-own``), beside the first, on ports of their own. A Slurm takes
about 11 s to stop (each daemon's SIGTERM waited out, one after another): an own one is stopped
in the background while the next tests run, the shared one when the pool ends. The 15 modules
of such tests under ``-n 2``: 9 min 35 s with a Slurm each, 5 min 20 s with the pool
(docs/benchmarks/history.md, 2026-12-07)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest

from support.waiting import wait_for

F = TypeVar("F", bound=Callable[..., Any])
SLURM_LOCAL = Path(__file__).resolve().parents[3] / "shared" / "tools" / "slurm_local.sh"
# the first shared Slurm's ports (slurmctld at BASE-1183, node nI at BASE+I), each next one's
# 200 on; the own ones' from BASE+OWN_AT (the two kinds' tests run on two workers side by side)
PORT_BASE = 23400
PORT_STEP = 200
OWN_AT = 1200


def _env(state: Path, port_base: int, nodes: int, extra_conf: str) -> dict[str, str]:
    env = {**os.environ, "SLURM_LOCAL_PORT_BASE": str(port_base), "SLURM_LOCAL_DEPS": "0"}
    env["SLURM_LOCAL_NODES"] = str(nodes)
    if extra_conf:
        state.mkdir(parents=True, exist_ok=True)
        (state / "extra.conf.in").write_text(extra_conf)
        env["SLURM_LOCAL_EXTRA_CONF"] = str(state / "extra.conf.in")
    env["SLURM_CONF"] = str(state / "etc" / "slurm.conf")
    return env


def _stop(state: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """Every job cancelled, then the daemons stopped: the stop runs on (``wait()`` for it)."""
    subprocess.run(["scancel", "--user", os.environ.get("USER", "root")], env=env)
    return subprocess.Popen(
        ["bash", str(SLURM_LOCAL), "stop", str(state)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


def idle(env: dict[str, str], nodes: int) -> bool:
    """No job pending, running or ending, and every real node idle."""
    q = subprocess.run(["squeue", "-h", "-o", "%i"], env=env, capture_output=True, text=True)
    s = subprocess.run(["sinfo", "-h", "-N", "-n", f"n[1-{nodes}]", "-o", "%t"],
                       env=env, capture_output=True, text=True)  # fmt: skip
    return q.returncode == s.returncode == 0 and not q.stdout and set(s.stdout.split()) == {"idle"}


class SlurmPool:
    """The Slurms of one test run (see the module's docstring); ``close`` stops them all."""

    def __init__(self, tmp: pytest.TempPathFactory) -> None:
        self.tmp = tmp
        self.base = int(os.environ.get("GPUFLEET_SLURM_PORT_BASE") or PORT_BASE)
        self.owned = 0  # how many own Slurms so far: the next one's ports
        self.running: dict[str, tuple[Path, dict[str, str]]] = {}  # the shared ones
        self.stopping: list[subprocess.Popen[bytes]] = []

    def _start(self, nodes: int, extra_conf: str, port_base: int) -> tuple[Path, dict[str, str]]:
        state = self.tmp.mktemp("slurm")
        env = _env(state, port_base, nodes, extra_conf)
        start = subprocess.run(["bash", str(SLURM_LOCAL), "start", str(state)],
                               env=env, capture_output=True, text=True)  # fmt: skip
        if start.returncode:
            _stop(state, env).wait()
            raise AssertionError(f"slurm_local.sh start failed:\n{start.stdout}{start.stderr}")
        return state, env

    def shared(self, nodes: int = 4) -> dict[str, str]:
        """The run's Slurm of ``nodes`` (slurm_local.sh's configuration): no job of an earlier
        test pending or running (cancelled, and waited out), every node idle."""
        key = str(nodes)
        if key not in self.running:
            at = self.base + PORT_STEP * len(self.running)
            self.running[key] = self._start(nodes, "", at)
        _, env = self.running[key]
        subprocess.run(["scancel", "--user", os.environ.get("USER", "root")], env=env)
        wait_for("the shared Slurm idle", lambda: idle(env, nodes), 60)
        return env

    @contextmanager
    def own(self, nodes: int = 4, extra_conf: str = "") -> Iterator[dict[str, str]]:
        """A new Slurm of ``nodes`` and ``extra_conf`` (slurm.conf lines beside the script's:
        partitions, nodes), for the ``with`` block alone: stopped in the background after."""
        at = self.base + OWN_AT + PORT_STEP * self.owned
        self.owned += 1
        state, env = self._start(nodes, extra_conf, at)
        try:
            yield env
        finally:
            self.stopping.append(_stop(state, env))

    def close(self) -> None:
        """Every Slurm stopped (the shared ones at once, side by side), and waited for."""
        self.stopping += [_stop(state, env) for state, env in self.running.values()]
        self.running.clear()
        for p in self.stopping:
            p.wait()
        self.stopping.clear()


# the marks of a test that runs against the real Slurm (its xdist group comes from the fixture
# it takes: grouping.ONE_GROUP)
LIVE = (
    pytest.mark.e2e,
    pytest.mark.requires("slurm"),  # skipped where there is none; under CI=true, failed
)


def live(test: F) -> F:
    """``test`` with ``LIVE``'s marks."""
    for mark in reversed(LIVE):
        test = mark(test)
    return test


class SlurmShell:
    """Slurm's commands run against the Slurm of ``env``, from ``cwd``."""

    def __init__(self, env: dict[str, str], cwd: Path) -> None:
        self.env, self.cwd = env, cwd

    def __call__(self, *argv: str) -> str:
        """``argv``'s standard output; it must succeed."""
        r = subprocess.run(argv, env=self.env, cwd=self.cwd, capture_output=True, text=True)
        assert r.returncode == 0, f"{argv}: {r.stdout}{r.stderr}"
        return r.stdout

    def sbatch(self, *opts: str) -> str:
        """The id of a job of ``opts`` (its output thrown away)."""
        return self("sbatch", "--parsable", "-o", "/dev/null", *opts).strip().split(";")[0]

    def state(self, jid: str) -> str:
        """The job's state word, ended or not."""
        return self("squeue", "-h", "-t", "all", "-o", "%T", "-j", jid).strip()
