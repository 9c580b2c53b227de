"""``gpufleet submit``'s flags mode with sbatch's options (issue 23): each is taken with sbatch's
meaning (read by the #SBATCH reader, mapped as a script's line is) or refused naming what to
give instead, never run as the command; ``--gpus`` is sbatch's (the job's GPUs in all)
everywhere. What Slurm itself does was checked on Slurm 22.05 (shared/tools/slurm_local.sh):
``sbatch -N 2 --gpus 2`` runs one GPU on each of two nodes, ``sbatch -N 3 --gpus 1`` is refused
("--gpus < -N", "Invalid generic resource (gres) specification"), ``sbatch --nice 5 --wrap``
takes 5 for the script."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_cli_support import FakeApi, api, cli

from gpufleet.io.slurm_opts import OPTIONS

__all__ = ["api"]  # the fixture, imported for pytest


def dry(*args: str) -> Any:
    r = cli("submit", "--dry-run", "--json", *args)
    assert r.code == 0, r.stderr
    return r.json()["spec"]


def refused(*args: str) -> str:
    r = cli("submit", "--dry-run", "--json", *args)
    assert r.code == 2 and r.stdout == "", (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    return r.stderr


def test_nodes_and_gpus_are_sbatchs_not_the_command(api: FakeApi) -> None:
    assert "--gpus < -N" in refused("-N", "3", "--gpus", "1", "--", "true")
    assert "--gpus < -N" in refused("--gpus", "1", "-N", "3", "--", "true")  # either order
    s = dry("-N", "2", "--gpus", "2", "--", "true")
    assert s["command"] == ["true"] and s["name"] == "true"
    assert (s["workers"], s["distinct_nodes"], s["gpus_per_worker"]) == (2, True, 1)
    s = dry("--gres=gpu:1", "--", "true")
    assert (s["command"], s["workers"], s["gpus_per_worker"]) == (["true"], 1, 1)
    assert api.requests == []


def test_every_slurm_style_option_of_the_issue_is_taken_with_sbatchs_meaning() -> None:
    s = dry("-n", "4", "--gres=gpu:1", "--mem", "16G", "-J", "t", "-p", "gpu", "-t", "10",
            "--nice=5", "--constraint=a100", "--", "python", "x.py")  # fmt: skip
    assert s["command"] == ["python", "x.py"]
    assert (s["name"], s["queue"], s["time_limit_s"], s["priority"]) == ("t", "gpu", 600.0, -5)
    assert (s["workers"], s["tasks_per_worker"], s["gpus_per_worker"]) == (1, 4, 1)
    assert (s["memory_mib"], s["cpus"], s["constraint"]) == (16384, 4, "a100")
    s = dry("-N", "2", "--ntasks-per-node=4", "-c", "2", "--gpus-per-task=1", "--", "x")
    assert (s["workers"], s["tasks_per_worker"], s["cpus"], s["gpus_per_worker"]) == (2, 4, 8, 4)
    s = dry("-N2", "--gpus-per-node", "4", "--gpu-model", "A100", "--", "x")  # ours after theirs
    assert (s["workers"], s["gpus_per_worker"], s["gpu_models"]) == (2, 4, ["A100"])


def test_what_gpufleet_does_not_take_is_refused_all_at_once_naming_what_to_give() -> None:
    err = refused("-A", "proj", "--qos=hi", "--wrap=x", "--parsable", "--", "true")
    assert "-A proj is not taken by gpufleet: fair share is per queue (--partition)" in err
    assert "--qos=hi is not taken by gpufleet: gpufleet has no QOS" in err
    assert "--wrap=x: give the command after --" in err
    assert "--parsable: gpufleet submit --json prints the job ids" in err
    assert "--nice 5: sbatch takes --nice's value only as --nice=5" in refused(
        "--nice", "5", "--", "true"
    )
    assert "did you mean --gpus-per-node?" in refused("--gpu-per-node=1", "--", "true")
    assert "did you mean --gpu-model?" in refused("--gpu-modle", "A100", "--", "true")  # ours
    assert "--workers is gpufleet's gang size" in refused("--workers", "2", "-N", "2", "--", "x")
    assert "not for a job YAML" in refused("-f", "jobs.yaml", "-N", "2")


@pytest.mark.parametrize("opt", OPTIONS, ids=lambda o: o.name)
def test_no_option_of_sbatch_is_ever_run_as_the_command(opt: Any) -> None:
    """Every option in sbatch's table, long and short: taken (the command stays ``true``) or
    refused with its name; never the command."""
    forms = [[f"--{opt.name}"] if opt.arg != "required" else [f"--{opt.name}", "1"]]
    if opt.short:
        forms.append([f"-{opt.short}"] if opt.arg == "none" else [f"-{opt.short}1"])
    for words in forms:
        r = cli("submit", "--dry-run", "--json", *words, "--", "true")
        if r.code == 0 and words == ["--help"]:
            assert "Usage:" in r.stdout  # gpufleet submit's own help
        elif r.code == 0:
            assert r.json()["spec"]["command"] == ["true"], words
        else:
            named = (words[0].split("=")[0][:2], f"--{opt.name}")
            assert r.code == 2 and any(n in r.stderr for n in named), (words, r.stderr)
            assert "cannot start" not in r.stderr


def test_gpus_is_the_jobs_in_all_everywhere(tmp_path: Path) -> None:
    assert dry("--workers", "2", "--gpus", "8", "--", "x")["gpus_per_worker"] == 4
    assert "--gpus 3 does not divide among 2 workers" in refused(
        "--workers", "2", "--gpus", "3", "--", "x"
    )
    f = tmp_path / "j.yaml"
    f.write_text("name: a\nworkers: 2\ncommand: [x]\n")
    assert dry("-f", str(f), "--gpus", "4")["gpus_per_worker"] == 2
    script = tmp_path / "s.sh"
    script.write_text("#!/bin/bash\n#SBATCH -N 1 --gres=gpu:1\ntrue\n")
    s = dry("-N", "2", "--ntasks-per-node=2", str(script))  # over the script's lines
    assert (s["workers"], s["tasks_per_worker"], s["gpus_per_worker"]) == (2, 2, 1)
    assert s["batch"] is True


def test_gpus_takes_sbatchs_type_and_count() -> None:
    """sbatch's ``-G, --gpus=[type:]<number>``: a type names the GPUs' gres type."""
    for args in (["--gpus", "h100:2"], ["--gpus=h100:2"], ["-G", "h100:2"]):
        s = dry(*args, "--", "x")
        assert (s["workers"], s["gpus_per_worker"], s["gres_type"]) == (1, 2, "h100"), args
    s = dry("-N", "2", "--gpus", "a100:4", "--", "x")
    assert (s["workers"], s["gpus_per_worker"], s["gres_type"]) == (2, 2, "a100")
    assert "sbatch's --gpus=[TYPE:]COUNT" in refused("--gpus", "h100:two", "--", "x")


def test_parse_only_takes_sbatchs_options_before_the_script(tmp_path: Path) -> None:
    script = tmp_path / "s.sh"
    script.write_text("#!/bin/bash\n#SBATCH -N 1\ntrue\n")
    r = cli("submit", "--parse-only", "--json", "-N", "2", "--ntasks-per-node=3", str(script))
    assert r.code == 0, r.stderr
    assert (r.json()["nodes"], r.json()["ntasks"]) == ([2, 2], 6)


def test_a_batch_scripts_own_options_before_a_command_are_refused_saying_why(
    tmp_path: Path,
) -> None:
    for opt in (["-o", "out.txt"], ["--chdir", "/tmp"], ["--export=NONE"]):
        err = refused(*opt, "--", "true")
        assert "is sbatch's, for an #SBATCH script; a command's output and error are its " in err
    f = tmp_path / "j.yaml"
    f.write_text("name: a\ncommand: [x]\n")
    assert "a job YAML sets batch, workdir" in refused("-o", "x.out", "-f", str(f))
