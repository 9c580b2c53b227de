"""An agent run as root looks once, at start, whether the accounts its tasks run as can reach
what it runs as them, and refuses to start with the command that fixes it (ADR 0035)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the check is a root agent's")


@pytest.fixture
def closed_dir() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(dir="/var/tmp", prefix="closed-"))
    d.chmod(0o700)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _agent(data_dir: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "gpufleet.agent", "--controller", "http://127.0.0.1:9"]
    argv += ["--name", "n1", "--simulate", "1xH100", "--data-dir", str(data_dir), *extra]
    env = {**os.environ, "GPUFLEET_TOKEN": "t"}
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)


def test_a_data_dir_others_cannot_reach_refuses_the_start_with_the_fix(closed_dir: Path) -> None:
    done = _agent(closed_dir / "data")
    assert done.returncode == 2, done.stderr
    assert f"{closed_dir} (0700) is closed to others" in done.stderr
    assert f"fix: chmod o+x {closed_dir}" in done.stderr
    assert "gpufleet install --prefix /opt/gpufleet" in done.stderr
    assert "--no-access-check" in done.stderr
    assert not (closed_dir / "data" / "slurm-bin").exists()  # refused before anything started
