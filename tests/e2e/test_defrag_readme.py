"""The README's "Defragmentation" command runs as written: the replay moves one 4-GPU job (b,
started at 10 s: 4 GPUs × 590 s lost) so that the whole-node job, which finds 4 free GPUs on
each node, starts at once; no job waits."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e
README = Path(__file__).parents[2] / "README.md"


def readme_blocks(title: str) -> list[str]:
    section = README.read_text().split(f"### {title}\n", 1)[1].split("\n### ", 1)[0]
    return [part.split("```", 1)[0] for part in section.split("```sh\n")[1:]]


def test_the_readmes_defrag_replay_moves_one_job(tmp_path: Path) -> None:
    (block,) = readme_blocks("Defragmentation")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    out = subprocess.run(
        ["bash", "-ec", block], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    figures = json.loads(out.stdout.strip().splitlines()[-1])
    assert figures["jobs"] == 4 and figures["preemptions"] == 1
    assert figures["lost_gpu_hours_preemption"] == pytest.approx(4 * 590 / 3600, abs=1e-5)
    assert figures["avg_wait_s"] == 0.0
