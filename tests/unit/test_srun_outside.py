"""How srun outside a job cuts its command line: the allocation's options to the job (as sbatch
takes them), the rest to the in-job srun that the job's script runs (shims/srun.py)."""

from __future__ import annotations

import pytest

from gpufleet.client.errors import ApiError
from gpufleet.shims.common import Usage
from gpufleet.shims.srun import Follow, sbatch_argv, script, split


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


class _Controller:
    """A controller's answers to Follow's calls: the signal call's status (200 or a refusal)."""

    def __init__(self, signal_status: int) -> None:
        self.status = signal_status
        self.calls: list[tuple[str, str]] = []

    def call(self, method: str, path: str, **_: object) -> dict[str, object]:
        self.calls.append((method, path))
        if self.status != 200:
            raise ApiError(self.status, "Not Found")
        return {}

    def cancel(self, job: str) -> None:
        self.calls.append(("POST", f"/jobs/{job}/cancel"))


@pytest.mark.parametrize(
    ("status", "asked"),
    [
        # each Ctrl-C goes on to the step's srun as SIGINT (ADR 0078), nothing said here
        (200, [("POST", "/jobs/7/signal")] * 2),
        # a controller with no signal call (older): asked once, then two Ctrl-C cancel it
        (404, [("POST", "/jobs/7/signal"), ("POST", "/jobs/7/cancel")]),
        (405, [("POST", "/jobs/7/signal"), ("POST", "/jobs/7/cancel")]),
    ],
)
def test_ctrl_c_goes_to_the_step_or_cancels_where_no_signal_call(
    status: int, asked: list[tuple[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    c = _Controller(status)
    f = Follow(c, "7", None)  # type: ignore[arg-type]
    f.interrupts = [100.0, 100.4]  # two Ctrl-C 0.4 s apart
    f.on_interrupts(pending=False)
    assert c.calls == asked
    said = capsys.readouterr().err
    assert ("forcing job termination" in said) == (status != 200), said
