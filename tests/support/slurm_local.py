"""A real Slurm 22.05 on loopback for differential tests (``shared/tools/slurm_local.sh``)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

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
