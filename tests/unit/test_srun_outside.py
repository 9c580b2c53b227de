"""How srun outside a job cuts its command line: the allocation's options to the job (as sbatch
takes them), the rest to the in-job srun that the job's script runs (shims/srun.py)."""

from __future__ import annotations

import pytest

from gpufleet.shims.common import Usage
from gpufleet.shims.srun import sbatch_argv, script, split


def test_the_allocations_options_go_to_the_job_the_rest_to_the_step() -> None:
    r = split(["-N1", "-n", "2", "--gres=gpu:1", "-t", "10", "-l", "-o", "out-%t", "-K",
               "-p", "gpu", "--exclusive", "hostname", "-n", "3"])  # fmt: skip
    assert r.job == ["-N1", "-n", "2", "--gres=gpu:1", "-t", "10", "-p", "gpu", "--exclusive"]
    assert r.step == ["-l", "-o", "out-%t", "-K", "--", "hostname", "-n", "3"]
    assert script(r) == "exec srun -l -o out-%t -K -- hostname -n 3"


def test_the_job_is_named_after_the_command_unless_J() -> None:
    argv = sbatch_argv(split(["--gpus=2", "/usr/bin/python3", "train.py"]))
    assert argv[:3] == ["--gpus=2", "--job-name", "python3"]
    assert argv[-2:] == ["--wrap", "exec srun -- /usr/bin/python3 train.py"]
    assert "--job-name" not in sbatch_argv(split(["-J", "mine", "true"]))[2:]


def test_immediate_takes_an_attached_value_only() -> None:
    assert split(["-I", "true"]).immediate == 0
    assert split(["--immediate=5", "true"]).immediate == 5
    assert split(["-I5", "true"]).immediate == 5
    with pytest.raises(Usage, match="--immediate value 'x'"):
        split(["--immediate=x", "true"])


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--pty", "bash"], "--pty: gpufleet's srun relays no terminal"),
        (["-n2"], "no executable given"),
        (["--nosuch", "true"], "unrecognized option '--nosuch'"),
        (["--mpi=pmix", "true"], "only --mpi=none"),
    ],
)
def test_what_the_step_cannot_do_is_refused_before_anything_is_submitted(
    argv: list[str], says: str
) -> None:
    with pytest.raises(Usage, match=says.replace("'", ".")):
        split(argv)
