"""``gpufleet hold`` and ``gpufleet release``: Slurm's ``scontrol hold`` (``--user``: ``uhold``)
and ``scontrol release`` of jobs, by id (ADR 0074). A held job stays pending (Reason
JobHeldUser, or JobHeldAdmin for an admin's hold, which only an admin releases) and keeps its
place by arrival."""

from __future__ import annotations

from typing import Annotated

import typer

from gpufleet.cli import output as out
from gpufleet.cli.config import ServerOpt, TokenOpt, connect
from gpufleet.cli.jobs.common import JsonOpt
from gpufleet.client import ApiError

JobIds = Annotated[list[str], typer.Argument(help="Job ids.", metavar="JOB...", show_default=False)]


def hold(
    job_ids: JobIds,
    user_hold: Annotated[
        bool, typer.Option("--user", help="A user hold even as an admin (scontrol uhold).")
    ] = False,
    json_out: JsonOpt = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Hold pending jobs (scontrol hold): they are not started until released; an admin's
    hold is an admin hold, which only an admin may release."""
    _each(job_ids, "uhold" if user_hold else "hold", json_out, server, token)


def release(
    job_ids: JobIds, json_out: JsonOpt = False, server: ServerOpt = None, token: TokenOpt = None
) -> None:
    """Release held jobs (scontrol release): they start in their place by arrival."""
    _each(job_ids, "release", json_out, server, token)


def _each(
    ids: list[str], action: str, json_out: bool, server: str | None, token: str | None
) -> None:
    done, failed = [], 0
    with connect(server, token) as c:
        for jid in ids:
            try:
                done.append(c.hold(jid, action))
            except ApiError as e:
                if e.status == 401 or e.status >= 500:
                    raise
                out.error(f"job {jid}: {str(e).removeprefix(f'{e.status}: ')} ({e.status})")
                failed += 1
    if json_out:
        out.emit_json(done)
    else:
        for j in done:
            print(f"job {j.id}: {'released' if action == 'release' else 'held'}")
    if failed:
        raise typer.Exit(1)
