"""``gpufleet submit``'s fast path (cli/submit_fast.py) reads the typer command's own options,
as typer reads them, and leaves to typer whatever it does not serve. (Its submissions against a
live controller, beside typer's: tests/e2e/test_slurm_shims_live.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest
import typer

from gpufleet.cli import jobs, submit_fast


def test_the_fast_paths_options_are_the_commands() -> None:
    app = typer.Typer()
    jobs.register(app)
    command = typer.main.get_group(app).commands["submit"]
    typer_opts: dict[str, tuple[str, bool]] = {}
    for p in command.params:
        for opt in [*p.opts, *getattr(p, "secondary_opts", [])]:
            typer_opts[opt] = (str(p.name), not getattr(p, "is_flag", False))
    for opt, (dest, kind) in submit_fast.OPTIONS.items():
        assert typer_opts[opt] == (dest, kind not in ("true", "false")), opt


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["--bogus", "x"],
        ["--gpus"],  # a value missing
        ["--gpus", "x", "--", "true"],
        ["--gpus", "-1", "--", "true"],
        ["--workers", "0", "--", "true"],
        ["--gpu-share", "2", "--", "true"],
        ["--cpus", "nan", "--", "true"],
        ["--json=yes", "--", "true"],
        ["--env", "NOEQUALS", "--", "true"],
        ["--mem", "4G", "--", "true"],  # its reader imports the #SBATCH reader: typer's
        ["--time", "10", "--", "true"],
        ["--dry-run", "--", "true"],
        ["-f", "jobs.yaml"],
        ["-Jname", "--", "true"],  # an attached value
        ["--gpus", "1"],  # no command
        ["--", "train.sbatch"],  # the typo of a script
    ],
)
def test_what_it_leaves_to_typer(argv: list[str]) -> None:
    assert submit_fast.parse(argv) is None, argv


def test_a_file_as_the_command_is_typers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "job.sh").write_text("#!/bin/sh\n#SBATCH -G 1\ntrue\n")
    assert submit_fast.parse(["job.sh"]) is None


def test_what_it_reads() -> None:
    argv = ["-J", "train", "--gpus=2", "--gpu-model", "A100", "--gpu-model=H100"]
    argv += ["--env", "A=1", "--no-preemptible", "--priority", "-3"]
    argv += ["--", "python", "t.py", "--gpus", "9"]
    assert submit_fast.parse(argv) == {
        "name": "train",
        "gpus": 2,
        "gpu_model": ["A100", "H100"],
        "env": ["A=1"],
        "preemptible": False,
        "priority": -3,
        "command": ["python", "t.py", "--gpus", "9"],
    }
    assert submit_fast.parse(["python", "-c", "pass"]) == {"command": ["python", "-c", "pass"]}
