"""The Slurm shims as a user runs them, as processes, against an in-process controller of one
node (``test_api.serve``, its clock a ``ManualClock``): what the ``*_vs_slurm`` modules replay
on gpufleet before they replay it on a real Slurm (``support.slurm_local``)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from test_api import T0, Api, register, serve

from gpufleet.base.clock import ManualClock
from gpufleet.server.store import Store

# run(who, command, *argv): ``who`` is "admin" (the controller's admin token) or "user" (alice's)
Run = Callable[..., subprocess.CompletedProcess[str]]
SHIMS = {"sbatch": "gpufleet.shims.sbatch", "squeue": "gpufleet.shims.squeue",
         "scontrol": "gpufleet.shims.scontrol", "scancel": "gpufleet.shims.scancel"}  # fmt: skip


@contextmanager
def shim_runner(tmp_path: Path) -> Iterator[Run]:
    """A controller on SQLite under ``tmp_path`` with ``node-0`` registered, and how to run
    its shims (``shims``); stopped on the way out."""
    store = Store.open(f"sqlite:///{tmp_path / 'g.db'}")
    try:
        with serve(store, tmp_path / "controller", ManualClock(T0)) as api:
            register(api.agent("node-0"), "node-0")
            yield shims(api, tmp_path)
    finally:
        store.close()


def shims(api: Api, tmp_path: Path) -> Run:
    """``run(who, command, *argv)``: the shim ``command`` as ``who``, from ``tmp_path``, with no
    GPUFLEET_ setting of this environment's."""
    tokens = {"admin": (tmp_path / "controller" / "admin.token").read_text().strip(),
              "user": api.token("user", user="alice")}  # fmt: skip
    base = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}

    def run(who: str, command: str, *argv: str) -> subprocess.CompletedProcess[str]:
        env = {**base, "GPUFLEET_SERVER": api.url, "GPUFLEET_TOKEN": tokens[who],
               "GPUFLEET_CONFIG": str(tmp_path / "none.yaml")}  # fmt: skip
        cmd = [sys.executable, "-m", SHIMS[command], *argv]
        return subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True)

    return run


def slurm_admin(env: dict[str, str], cwd: Path) -> Run:
    """``run(who, command, *argv)`` on a real Slurm (``env``: the shared Slurm's), as root: the
    admin's part of a recorded scenario alone (a user's part needs a user munge lets in)."""

    def run(who: str, command: str, *argv: str) -> subprocess.CompletedProcess[str]:
        assert who == "admin", who
        return subprocess.run([command, *argv], env=env, cwd=cwd, capture_output=True,
                              text=True, timeout=60)  # fmt: skip

    return run
