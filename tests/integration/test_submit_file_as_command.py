"""``gpufleet submit FILE`` without ``-f``, as a user types it, against a served controller: a
local file that is neither executable nor a ``#!`` script cannot run as the job's command, so
it is refused at submit in one sentence naming what to do instead, and nothing is stored. What
can run (an executable, a ``#!`` script, a command on the PATH) is still submitted."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_api import Api

GPUFLEET = Path(sys.executable).with_name("gpufleet")


def _submit(api: Api, cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "GPUFLEET_SERVER": api.url,
        "GPUFLEET_TOKEN": api.token("user", user="alice"),
    }
    env.pop("GPUFLEET_TOKEN_FILE", None)
    env["GPUFLEET_CONFIG"] = str(cwd / "none.yaml")
    return subprocess.run(
        [str(GPUFLEET), "submit", *argv], cwd=cwd, env=env, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("name", "text", "hint"),
    [
        ("job.yaml", "name: train\ncommand: [python, train.py]\n", "gpufleet submit -f job.yaml"),
        ("job.json", '{"name": "train", "command": ["true"]}\n', "gpufleet submit -f job.json"),
        ("spec", "name: train\ncommand: [python, train.py]\n", "gpufleet submit -f spec"),
        ("run.sh", "echo hi\n", "chmod +x run.sh"),
    ],
)
def test_a_plain_file_is_refused_as_a_command(
    api: Api, tmp_path: Path, name: str, text: str, hint: str
) -> None:
    (tmp_path / name).write_text(text)
    r = _submit(api, tmp_path, "--gpus", "1", name)
    assert r.returncode == 2, (r.stdout, r.stderr)
    first = r.stderr.splitlines()[0]
    assert first.startswith(f"error: {name} is a file that is neither executable nor a script"), (
        r.stderr
    )
    assert hint in first, first
    if not name.endswith((".yaml", ".json")) and hint.startswith("chmod"):
        assert f"sbatch {name}" in first
    assert "nothing was submitted" in r.stderr
    assert r.stdout == ""
    assert api.stored_ids() == []


def test_what_can_run_is_still_submitted(api: Api, tmp_path: Path) -> None:
    exe = tmp_path / "run.sh"
    exe.write_text("echo hi\n")
    exe.chmod(0o755)
    shebang = tmp_path / "train.py"
    shebang.write_text("#!/usr/bin/env python3\nprint('hi')\n")
    (tmp_path / "true").write_text("a file that is not the command\n")  # true is PATH's
    for argv in (["./run.sh"], ["train.py"], ["--", "echo", "job.yaml"], ["true"]):
        r = _submit(api, tmp_path, "--gpus", "1", *argv)
        assert r.returncode == 0, (argv, r.stderr)
        assert r.stdout.startswith("Submitted job "), r.stdout
    assert len(api.stored_ids()) == 4
