"""sbatch's --export, --export-file and --chdir at submit (io/export.py), and its file name
patterns (model/fname.py), as Slurm reads them."""

from __future__ import annotations

import pytest

from gpufleet.io.export import capture, read_export_file, workdir
from gpufleet.model.errors import SpecError
from gpufleet.model.fname import NO_VAL, FileFacts, expand, shown

ENV = {
    "PATH": "/home/a/venv/bin:/usr/bin",
    "VIRTUAL_ENV": "/home/a/venv",
    "HOME": "/home/a",
    "GPUFLEET_TOKEN": "gf_secret",
    "GPUFLEET_SERVER": "https://ctl:8080",
    "SLURM_JOB_ID": "77",  # an enclosing allocation's: sbatch passes it on, the job's overrides
    "LIST": "a,b",
}


def cap(export: str | None, **kw: str) -> dict[str, str]:
    return capture(export, ENV, submit_dir="/home/a/proj", submit_host="login1", **kw)


def test_all_is_the_default_and_never_carries_gpufleet_credentials() -> None:
    env = cap(None)
    assert env["PATH"] == ENV["PATH"] and env["VIRTUAL_ENV"] == "/home/a/venv"
    assert not any(k.startswith("GPUFLEET_") for k in env)
    assert env["SLURM_JOB_ID"] == "77" and env["LIST"] == "a,b"
    assert (env["SLURM_SUBMIT_DIR"], env["SLURM_SUBMIT_HOST"]) == ("/home/a/proj", "login1")
    assert "SLURM_EXPORT_ENV" not in env  # sbatch sets it from an --export given
    assert cap("ALL") == {**env, "SLURM_EXPORT_ENV": "ALL"}


def test_none_keeps_only_slurm_variables() -> None:
    """And says the node gives the user's login environment, as Slurm 22.05's batch shell
    shows (SLURM_GET_USER_ENV=1 with --export=NONE only)."""
    env = cap("NONE")
    assert set(env) == {
        "SLURM_JOB_ID", "SLURM_SUBMIT_DIR", "SLURM_SUBMIT_HOST", "SLURM_EXPORT_ENV",
        "SLURM_GET_USER_ENV",
    }  # fmt: skip
    assert env["SLURM_GET_USER_ENV"] == "1"
    assert "SLURM_GET_USER_ENV" not in cap("PATH") and "SLURM_GET_USER_ENV" not in cap(None)


def test_a_list_is_none_plus_the_variables_named_or_set() -> None:
    env = cap("PATH,FOO=x,2,MISSING")
    assert (
        env["PATH"] == ENV["PATH"] and env["FOO"] == "x,2"
    )  # a value may hold commas (not before a name)
    assert "VIRTUAL_ENV" not in env and "MISSING" not in env and "HOME" not in env
    env = cap("ALL,FOO=1")
    assert env["FOO"] == "1" and env["VIRTUAL_ENV"] == "/home/a/venv"


def test_gpufleet_variables_cannot_be_exported_by_name() -> None:
    with pytest.raises(SpecError, match="never exported"):
        cap("GPUFLEET_TOKEN")
    with pytest.raises(SpecError, match="never exported"):
        read_export_file("GPUFLEET_TOKEN=x\0")


def test_the_export_file_holds_nul_separated_definitions() -> None:
    env = cap("NONE", export_file="A=1\0B=two\nlines\0")
    assert (env["A"], env["B"]) == ("1", "two\nlines")
    assert read_export_file("A=1\nB=2\n") == {"A": "1", "B": "2"}  # a file without NULs
    with pytest.raises(SpecError, match="definition 2"):
        read_export_file("A=1\0oops\0")


def test_chdir_is_relative_to_the_submit_directory() -> None:
    assert workdir(None, "/home/a/proj") == "/home/a/proj"
    assert workdir("runs/1", "/home/a/proj") == "/home/a/proj/runs/1"
    assert workdir("/scratch/x", "/home/a/proj") == "/scratch/x"


F = FileFacts("123", "train", "alice", "gpu-01.lab")
A = FileFacts("130", "train", "alice", "n1", array_id="123", array_index=7)


@pytest.mark.parametrize(
    ("pattern", "facts", "name"),
    [
        ("slurm-%j.out", F, "slurm-123.out"),
        ("slurm-%A_%a.out", A, "slurm-123_7.out"),
        ("%A_%a", F, f"123_{NO_VAL}"),  # outside an array: the job's id, Slurm's NO_VAL
        ("%x-%5j.%N.%u", F, "train-00123.gpu-01.alice"),  # %N: the short name
        # Slurm 22.05's batch file p-%%-%A-%a-%j-%J-%N-%n-%t-%u-%x-%5j-%b-%s.out of job 101:
        # p-%-101-4294967294-101-101-vm-0-0-root-pj-00101-%b-batch.out (%J: no step for the
        # batch script; %b is 23.02's, kept)
        ("%J|%s|%t|%n|%b", A, "130|batch|0|0|%b"),
        ("%4a-%3t-%12j", A, "0007-000-0000000130"),  # padding up to 10
        ("%%j 100%%", F, "%j 100%"),
        ("%q%", F, "%q%"),  # not a pattern: kept
        ("a\\%j", F, "a%j"),  # a backslash turns expansion off
        ("%5x", F, "train"),  # padding is for numbers
    ],
)
def test_file_name_patterns(pattern: str, facts: FileFacts, name: str) -> None:
    assert expand(pattern, facts) == name


def test_scontrol_shows_a_pattern_as_slurm_did() -> None:
    """Slurm 22.05's scontrol show job of that job and of task 1 of array 103 (job 104):
    StdOut=p-%%-101-4294967294-101-%J-%N-%n-%t-root-pj-%5j-%b-%s.out and q-103-1-%5a-104-%N.out
    (the files were p-%-101-…-00101-… and q-103-1-00001-104-vm.out)."""
    p = "p-%%-%A-%a-%j-%J-%N-%n-%t-%u-%x-%5j-%b-%s.out"
    one = FileFacts("101", "pj", "root", "n1")
    assert shown(p, one) == "p-%%-101-4294967294-101-%J-%N-%n-%t-root-pj-%5j-%b-%s.out"
    assert expand(p, one) == "p-%-101-4294967294-101-101-n1-0-0-root-pj-00101-%b-batch.out"
    task = FileFacts("104", "pj", "root", "n1", array_id="103", array_index=1)
    assert shown("q-%A-%a-%5a-%j-%N.out", task) == "q-103-1-%5a-104-%N.out"
