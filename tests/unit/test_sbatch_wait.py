"""``sbatch --wait``'s waiting (shims/sbatch_wait.py) against a scripted controller: its
back-off, the exit status it gives, and a controller that cannot answer for a while (against a
live cluster: tests/e2e/test_sbatch_wait_live.py; against Slurm:
tests/integration/test_sbatch_wait_vs_slurm.py)."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest

from gpufleet.client.errors import ApiError
from gpufleet.client.lean import Row
from gpufleet.io import sbatch_command
from gpufleet.shims.sbatch_wait import delays, exit_code, wait

Answer = dict[str, Any] | Exception


def job(state: str, code: int = 0, signal: int = 0, **more: Any) -> dict[str, Any]:
    ended = {"reason": "None", "code": code, "signal": signal}
    doc = {"state": state, "retries_used": 0, "spec": {}, "ended": ended, **more}
    if state in ("PENDING", "RUNNING", "STARTING"):
        doc["ended"] = None
    return doc


class Scripted:
    """A controller whose answers for each job come in turn (the last one repeats)."""

    def __init__(self, answers: dict[str, list[Answer]]) -> None:
        self.answers = answers
        self.asked: list[str] = []

    def job(self, job_id: str) -> Row:
        self.asked.append(job_id)
        queue = self.answers[job_id]
        a = queue.pop(0) if len(queue) > 1 else queue[0]
        if isinstance(a, Exception):
            raise a
        return Row({k: Row(v) if isinstance(v, dict) else v for k, v in a.items()})


def run(answers: dict[str, list[Answer]]) -> tuple[int, list[float], list[str], Scripted]:
    slept: list[float] = []
    said: list[str] = []
    c = Scripted(answers)
    code = wait(c, list(answers), sleep=slept.append, say=said.append)  # type: ignore[arg-type]
    return code, slept, said, c


def test_the_waits_grow_four_times_to_32_seconds_as_slurms() -> None:
    assert list(itertools.islice(delays(), 5)) == [2, 8, 32, 32, 32]


@pytest.mark.parametrize(
    ("end", "status"),
    [
        (job("SUCCEEDED"), 0),
        (job("FAILED", 3), 3),
        (job("FAILED", 0, 9), 1),  # killed by a signal
        (job("TIMED_OUT", 0, 15), 1),
        (job("CANCELLED", 0, 15), 1),  # cancelled running
        (job("CANCELLED", 0, 0), 0),  # cancelled pending: Slurm's 0:0
    ],
)
def test_the_exit_status_is_the_jobs_code_or_1_for_a_signal(
    end: dict[str, Any], status: int
) -> None:
    code, slept, said, _ = run({"7": [job("PENDING"), job("RUNNING"), end]})
    assert (code, slept, said) == (status, [2, 8, 32], [])


def test_an_array_gives_the_highest_of_its_tasks_and_asks_only_for_those_running() -> None:
    code, slept, _, c = run(
        {"1": [job("FAILED", 2)], "2": [job("RUNNING"), job("FAILED", 5)], "3": [job("SUCCEEDED")]}
    )
    assert (code, slept, c.asked) == (5, [2, 8], ["1", "2", "3", "2"])


def test_a_failed_job_with_a_retry_left_is_waited_for() -> None:
    retry = job("FAILED", 1, spec={"max_retries": 1})
    code, slept, _, _ = run({"4": [retry, job("SUCCEEDED", retries_used=1)]})
    assert (code, slept) == (0, [2, 8])


def test_a_controller_that_cannot_answer_is_asked_again() -> None:
    down = ConnectionRefusedError(111, "Connection refused")
    answers: list[Answer] = [down, ApiError(503, "the controller is starting"), job("FAILED", 4)]
    code, slept, said, _ = run({"9": answers})
    assert (code, slept) == (4, [2, 8, 32])
    assert said == [
        "Currently unable to load job state information, retrying: [Errno 111] Connection refused",
        "Currently unable to load job state information, retrying: 503: the controller is starting",
    ]


def test_a_job_gone_ends_the_wait_with_slurms_error() -> None:
    code, _, said, _ = run({"3": [ApiError(404, "no job 3")], "4": [job("FAILED", 2)]})
    assert code == 2
    assert said == ["Job 3 no longer found and exit code not found"]


def test_any_other_refusal_ends_it() -> None:
    with pytest.raises(ApiError):
        run({"3": [ApiError(401, "bad token")]})


def test_an_end_not_kept_says_only_success() -> None:
    assert exit_code(Row({"state": "SUCCEEDED", "ended": None})) == 0
    assert exit_code(Row({"state": "FAILED", "ended": None})) == 1


@pytest.mark.parametrize("flag", ["--wait", "-W"])
def test_sbatch_reads_wait_as_its_own(flag: str) -> None:
    script: Callable[[str | None], str] = lambda _: "#!/bin/sh\ntrue\n"  # noqa: E731
    b = sbatch_command.read([flag, "job.sh"], script=script, environ={}, cwd="/", host="h")
    assert b.wait and not b.parsable
    assert not sbatch_command.read(["job.sh"], script=script, environ={}, cwd="/", host="h").wait
