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
def slurm_local(state: Path, port_base: int) -> Iterator[dict[str, str]]:
    """A Slurm whose state is under ``state``, its ports from ``port_base`` (one per test module,
    so that two never meet); yields the environment its clients need. Stopped on the way out, and
    also when its start fails half-way (a port taken), so that nothing it began is left."""
    env = {**os.environ, "SLURM_LOCAL_PORT_BASE": str(port_base), "SLURM_LOCAL_DEPS": "0"}
    env["SLURM_CONF"] = str(state / "etc" / "slurm.conf")
    run = ["bash", str(SLURM_LOCAL)]
    try:
        subprocess.run([*run, "start", str(state)], env=env, check=True, capture_output=True)
        yield env
    finally:
        subprocess.run(["scancel", "--user", os.environ.get("USER", "root")], env=env)
        subprocess.run([*run, "stop", str(state)], env=env, capture_output=True)
