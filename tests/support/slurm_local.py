"""A real Slurm 22.05 on loopback for differential tests (``shared/tools/slurm_local.sh``)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest

F = TypeVar("F", bound=Callable[..., Any])
SLURM_LOCAL = Path(__file__).resolve().parents[3] / "shared" / "tools" / "slurm_local.sh"


def have_slurm() -> bool:
    return bool(shutil.which("slurmctld")) and SLURM_LOCAL.exists()


@contextmanager
def slurm_local(state: Path, port_base: int, extra_conf: str = "") -> Iterator[dict[str, str]]:
    """A Slurm whose state is under ``state``, its ports from ``port_base`` (one per test module,
    so that two never meet); yields the environment its clients need. ``extra_conf``: slurm.conf
    lines of its own (partitions), beside the script's. Stopped on the way out, and also when
    its start fails half-way (a port taken), so that nothing it began is left.
    ``GPUFLEET_SLURM_PORT_BASE`` in the environment replaces ``port_base`` (to run beside
    someone else's Slurm on the same ports; the modules that use it run one after another)."""
    port_base = int(os.environ.get("GPUFLEET_SLURM_PORT_BASE") or port_base)
    env = {**os.environ, "SLURM_LOCAL_PORT_BASE": str(port_base), "SLURM_LOCAL_DEPS": "0"}
    if extra_conf:
        state.mkdir(parents=True, exist_ok=True)
        (state / "extra.conf.in").write_text(extra_conf)
        env["SLURM_LOCAL_EXTRA_CONF"] = str(state / "extra.conf.in")
    env["SLURM_CONF"] = str(state / "etc" / "slurm.conf")
    run = ["bash", str(SLURM_LOCAL)]
    try:
        subprocess.run([*run, "start", str(state)], env=env, check=True, capture_output=True)
        yield env
    finally:
        subprocess.run(["scancel", "--user", os.environ.get("USER", "root")], env=env)
        subprocess.run([*run, "stop", str(state)], env=env, capture_output=True)


# the marks of a test that runs against the real Slurm (one Slurm at a time per worker group)
LIVE = (
    pytest.mark.e2e,
    pytest.mark.xdist_group("slurm-local"),
    pytest.mark.skipif(
        not have_slurm(),
        reason="no Slurm here (apt-get install slurm-wlm munge) or no shared/tools",
    ),
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
