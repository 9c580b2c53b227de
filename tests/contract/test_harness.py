"""The harness itself: the live side's command does what the scenario's rules say, as the
simulator plays them (a real shell, run as the agent runs it, with the agent's variables)."""

from __future__ import annotations

import os
import subprocess

import pytest
from harness import command
from scenarios import SCENARIOS, Job, Rule


def _exit_code(job: Job, attempt: int, rank: int, index: int | None) -> int:
    env = {**os.environ, "GPUFLEET_ATTEMPT": str(attempt), "RANK": str(rank)}
    env.pop("SLURM_ARRAY_TASK_ID", None)
    if index is not None:
        env["SLURM_ARRAY_TASK_ID"] = str(index)
    return subprocess.run(command(job, 0.001), env=env, timeout=10).returncode


JOB = Job(
    "j",
    0,
    {},
    (
        Rule(1, exit_code=3, attempt=1, rank=1),
        Rule(1, exit_code=4, attempt=1),
        Rule(1, exit_code=5, index=2),
        Rule(1, exit_code=0),
    ),
)


@pytest.mark.parametrize(
    ("attempt", "rank", "index", "code"),
    [(1, 1, None, 3), (1, 0, None, 4), (2, 1, None, 0), (2, 0, 2, 5), (1, 1, 2, 3), (3, 0, 0, 0)],
)
def test_the_first_matching_rule_decides_the_exit(
    attempt: int, rank: int, index: int | None, code: int
) -> None:
    assert JOB.step(attempt, rank, index).exit_code == code
    assert _exit_code(JOB, attempt, rank, index) == code


def test_every_scenario_job_has_a_rule_for_any_attempt() -> None:
    for sc in SCENARIOS:
        for job in sc.jobs:
            last = job.rules[-1]
            assert (last.attempt, last.rank, last.index) == (None, None, None), job.name
