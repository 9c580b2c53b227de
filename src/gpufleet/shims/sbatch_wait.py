"""``sbatch --wait`` (``-W``): after ``Submitted batch job N``, sbatch waits until the job ends
and exits with its exit code, as Slurm 22.05's ``_job_wait`` (sbatch.c):

- it asks the controller after 2 s, then 8, then every 32 s (each wait four times the last,
  at most 32 s), so a waiting sbatch costs the controller one request per job a half-minute;
- a job that ended by exiting gives its exit code; one ended by a signal (killed, past its
  time limit, cancelled while running), 1; a job cancelled before it ran, 0 (its ``0:0``);
  an array, the highest of its tasks';
- a controller that cannot answer (down, restarting, a standby taking over: a refused
  connection, a 502/503/504) is asked again, each time with ``sbatch: error: Currently unable to
  load job state information, retrying: …``; a job no longer there ends the wait with ``sbatch:
  error: Job N no longer found and exit code not found``;
- nothing else is printed: a failed job's end is said by its exit status alone.

Checked against a real Slurm 22.05 (tests/integration/test_sbatch_wait_vs_slurm.py)."""

from __future__ import annotations

import sys
import time

from gpufleet.client.errors import ApiError

TYPE_CHECKING = False  # no typing at run time: a command starts on few imports (issue 27)
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence
    from typing import Any

    from gpufleet.client.lean import LeanClient

FIRST_S, FACTOR, MOST_S = 2.0, 4, 32.0  # sbatch.c: sleep_time 2, *= 4, MAX_WAIT_SLEEP_TIME 32
RETRIED = (502, 503, 504)  # the controller (or a proxy before it) cannot answer now
ENDED = ("SUCCEEDED", "CANCELLED", "TIMED_OUT")  # FAILED: once no retry remains


def delays() -> Iterator[float]:
    """The waits before each look: 2, 8, 32, 32, … seconds."""
    d = FIRST_S
    while True:
        yield d
        d = min(d * FACTOR, MOST_S)


def finished(job: Any) -> bool:
    """Whether the job has ended for good (a failed one with a retry left will run again)."""
    if job.state in ENDED:
        return True
    spec = job.get("spec") or {}
    return bool(job.state == "FAILED" and job.retries_used >= int(spec.get("max_retries") or 0))


def exit_code(job: Any) -> int:
    """sbatch's exit status for an ended job: its exit code, or 1 when a signal ended it."""
    end = job.get("ended")
    if end is None:  # a controller that keeps no end: only success is known
        return 0 if job.state == "SUCCEEDED" else 1
    return 1 if end.get("signal") else int(end.get("code") or 0)


def wait(
    c: LeanClient,
    ids: Sequence[str],
    *,
    sleep: Callable[[float], object] = time.sleep,
    say: Callable[[str], object] | None = None,
) -> int:
    """Wait until every job of ``ids`` (an array's tasks, or the one job) has ended; the
    highest exit status among them. ``say``: where sbatch's error lines go (stderr)."""
    tell = say or (lambda line: sys.stderr.write(f"sbatch: error: {line}\n"))
    waiting, worst = list(ids), 0
    for d in delays():
        if not waiting:
            return worst
        sleep(d)
        still: list[str] = []
        for i, job_id in enumerate(waiting):
            try:
                job = c.job(job_id)
            except (ApiError, OSError) as e:
                if isinstance(e, ApiError) and e.status == 404:
                    tell(f"Job {job_id} no longer found and exit code not found")
                    continue
                if isinstance(e, ApiError) and e.status not in RETRIED:
                    raise
                tell(f"Currently unable to load job state information, retrying: {e}")
                still += waiting[i:]
                break
            if finished(job):
                worst = max(worst, exit_code(job))
            else:
                still.append(job_id)
        waiting = still
    raise AssertionError("unreachable: delays() never ends")
