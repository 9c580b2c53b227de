"""``gpufleet logs JOB``: a worker's output; with ``-f``, polled until the job ends."""

from __future__ import annotations

import sys
import time
from typing import Annotated

import typer

from gpufleet.api import schemas as s
from gpufleet.cli import output as out
from gpufleet.cli.config import ServerOpt, TokenOpt, connect
from gpufleet.client.http import Client
from gpufleet.model.job import JobState

sleep = time.sleep  # tests replace it: following logs never sleeps in a unit test
ENDED = {JobState.SUCCEEDED.value, JobState.CANCELLED.value, JobState.TIMED_OUT.value}


def logs(
    job: Annotated[str, typer.Argument(help="Job id.")],
    rank: Annotated[int, typer.Option("--rank", "-r", min=0, help="Which worker.")] = 0,
    stderr: Annotated[bool, typer.Option("--stderr", help="Show stderr, not stdout.")] = False,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing until the job ends.")
    ] = False,
    offset: Annotated[int, typer.Option("--offset", min=0, help="Start at this byte.")] = 0,
    timeout: Annotated[
        float, typer.Option("--timeout", min=0, help="Stop following after S seconds (0: never).")
    ] = 0.0,
    interval: Annotated[float, typer.Option("--interval", min=0.05, hidden=True)] = 1.0,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Print a worker's output; with -f, poll for more until the job ends."""
    stream = "stderr" if stderr else "stdout"
    with connect(server, token, {404: "check the job id and --rank (gpufleet show JOB)"}) as c:
        try:
            _print_logs(c, job, rank, stream, offset, follow, timeout, interval)
        except KeyboardInterrupt:
            raise typer.Exit(130) from None


def _print_logs(
    c: Client,
    job: str,
    rank: int,
    stream: str,
    offset: int,
    follow: bool,
    timeout: float,
    interval: float,
) -> None:
    deadline = time.monotonic() + timeout if timeout else None
    while True:
        chunk = c.logs(job, rank=rank, stream=stream, offset=offset)
        sys.stdout.write(chunk.data)
        sys.stdout.flush()
        offset = chunk.next_offset
        if not follow or chunk.complete:
            return
        if not chunk.data and _ended(c.job(job)):
            # the job ended between the two reads: print what arrived, then stop
            last = c.logs(job, rank=rank, stream=stream, offset=offset)
            sys.stdout.write(last.data)
            return
        if deadline is not None and time.monotonic() >= deadline:
            out.note(f"stopped following after {out.duration(timeout)}; job {job} still runs")
            return
        sleep(interval)


def _ended(j: s.JobOut) -> bool:
    if j.state in ENDED:
        return True
    return j.state == JobState.FAILED.value and j.retries_used >= int(j.spec.get("max_retries", 0))
