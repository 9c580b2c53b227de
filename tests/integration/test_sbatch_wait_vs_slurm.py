"""``sbatch --wait``'s exit status and output: gpufleet's shim against Slurm 22.05's.

What a real Slurm 22.05 printed (``/work/shared/tools/slurm_local.sh``; the last test runs it
again where Slurm is installed)::

    sbatch --wait --wrap true                 Submitted batch job 1     exit 0
    sbatch --wait --wrap "exit 3"             Submitted batch job 2     exit 3   (ExitCode=3:0)
    sbatch --wait --wrap false                Submitted batch job 3     exit 1
    sbatch --wait --wrap 'kill -9 $$'         Submitted batch job 4     exit 1   (ExitCode=0:9)
    sbatch --wait --wrap 'kill -TERM $$'      Submitted batch job 5     exit 1
    sbatch --wait --parsable --wrap "exit 3"  6                         exit 3
    sbatch --wait --array=1-3 --wrap 'exit $SLURM_ARRAY_TASK_ID'
                                              Submitted batch job 7     exit 3   (the highest)
    sbatch --wait --wrap 'sleep 100'; scancel (running)                 exit 1   (ExitCode=0:15)
    sbatch --wait --hold --wrap 'sleep 100'; scancel (pending)          exit 0   (ExitCode=0:0)

Nothing on stderr in any of them, nothing more on stdout. sbatch first looks after 2 s, then 8,
then every 32 (sbatch.c's ``_job_wait``)."""

from __future__ import annotations

import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from gpufleet.client.lean import Row
from gpufleet.model.job_end import JobEnd, ended_as
from gpufleet.shims.sbatch_wait import exit_code
from support.slurm_local import live

# (sbatch's options, Slurm's ExitCode of the job, sbatch's exit status, gpufleet's final state)
RECORDED = [
    (["--wrap", "true"], (0, 0), 0, "SUCCEEDED"),
    (["--wrap", "exit 3"], (3, 0), 3, "FAILED"),
    (["--wrap", "false"], (1, 0), 1, "FAILED"),
    (["--wrap", "kill -9 $$"], (0, 9), 1, "FAILED"),
    (["--wrap", "kill -TERM $$"], (0, 15), 1, "FAILED"),
    (["--array=1-3", "--wrap", "exit $SLURM_ARRAY_TASK_ID"], (3, 0), 3, "FAILED"),
]
CANCELLED_RUNNING, CANCELLED_PENDING = ((0, 15), 1), ((0, 0), 0)


@pytest.mark.parametrize(("argv", "status", "rc", "state"), RECORDED)
def test_gpufleet_exits_as_slurm_for_the_same_end(
    argv: list[str], status: tuple[int, int], rc: int, state: str
) -> None:
    end = ended_as(state, status)
    assert (end.code, end.signal) == status  # gpufleet keeps the end Slurm keeps
    assert exit_code(Row({"state": state, "ended": Row(end.to_dict())})) == rc


def test_a_cancelled_job_exits_as_slurms() -> None:
    running = ended_as("CANCELLED", None)  # no rank reported a status: it was stopped
    assert ((running.code, running.signal), 1) == CANCELLED_RUNNING
    assert exit_code(Row({"state": "CANCELLED", "ended": Row(running.to_dict())})) == 1
    pending = JobEnd("None", 0, 0)  # gpufleet's end of a job cancelled before it ran
    assert exit_code(Row({"state": "CANCELLED", "ended": Row(pending.to_dict())})) == 0


@live
def test_slurm_exits_as_recorded(shared_slurm: dict[str, str], tmp_path: Path) -> None:
    """Each case with and without ``--parsable``, all at once (each ``sbatch --wait`` waits
    2 s, then 8 more: twelve of them one after another took a minute)."""

    def wait(argv: list[str], parsable: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["sbatch", "--wait", *parsable, "-o", "/dev/null", *argv],
            env=shared_slurm, cwd=tmp_path, capture_output=True, text=True, timeout=120,
        )  # fmt: skip

    cases = [
        (argv, rc, parsable) for argv, _, rc, _ in RECORDED for parsable in ([], ["--parsable"])
    ]
    with ThreadPoolExecutor(len(cases)) as pool:
        done = list(pool.map(lambda c: wait(c[0], c[2]), cases))
    for (argv, rc, parsable), r in zip(cases, done, strict=True):
        out = r.stdout.splitlines()
        assert (r.returncode, r.stderr, len(out)) == (rc, "", 1), (argv, r)
        word = out[0] if parsable else out[0].removeprefix("Submitted batch job ")
        assert word.isdigit(), (argv, r.stdout)
