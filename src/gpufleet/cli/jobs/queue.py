"""``gpufleet jobs`` and ``gpufleet cancel``: the queue as squeue lists it and scancel empties
it (the selection itself is ``cli/selection.py``'s, shared with the Slurm shims)."""

from __future__ import annotations

from typing import Annotated

import typer

from gpufleet.cli import listing, selection
from gpufleet.cli import output as out
from gpufleet.cli.config import ServerOpt, TokenOpt, connect
from gpufleet.cli.jobs.common import JsonOpt
from gpufleet.cli.jobs.common import me as _me
from gpufleet.cli.jobs.common import slurm_states as _slurm_states


def jobs(
    user: Annotated[str | None, typer.Option("--user", "-u")] = None,
    queue: Annotated[str | None, typer.Option("--queue", "-p")] = None,
    state: Annotated[
        str | None,
        typer.Option(
            "--state", "-t", help="States, as squeue: PD,R,CD,F,TO,CA,NF,PR (or names), or all."
        ),
    ] = None,
    job_ids: Annotated[
        str | None, typer.Option("--jobs", "-j", help="Only these job ids (comma list).")
    ] = None,
    names: Annotated[
        str | None, typer.Option("--name", "-n", help="Only jobs of these names (comma list).")
    ] = None,
    me: Annotated[bool, typer.Option("--me", help="Only my jobs (this Unix user's).")] = False,
    fmt: Annotated[
        str | None,
        typer.Option("--format", "-o", help="squeue's format, e.g. '%.18i %.9P %.8j %.2t %R'."),
    ] = None,
    noheader: Annotated[
        bool, typer.Option("--noheader", "-h", help="No header line (squeue's -h).")
    ] = False,
    all_states: Annotated[bool, typer.Option("--all", "-a", help="Include finished jobs.")] = False,
    limit: Annotated[
        int, typer.Option("--limit", min=1, max=10000, help="At most this many, newest first.")
    ] = 200,
    json_out: JsonOpt = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """List jobs, like squeue: waiting jobs show their Reason, running ones their nodes.
    squeue's -t, -j, -n, --me, -o and -h work as squeue's."""

    wanted = _slurm_states(state)
    if state is not None and selection.lists_ended(wanted):
        all_states = True  # finished states are asked for: list them too
    user = _me(user, me)
    with connect(server, token) as c:
        rows, failed = selection.select(
            c,
            user=user,
            queue=queue,
            wanted=wanted,
            job_ids=job_ids,
            names=names,
            limit=limit,
            all_states=all_states,
            report=out.error,
            brief=not json_out,  # --json prints each job whole
        )
    try:
        listing.print_jobs(
            rows, json_out=json_out, fmt=fmt, noheader=noheader, all_states=all_states
        )
    except ValueError as e:
        out.fail(str(e), code=2)
    if failed:
        raise typer.Exit(1)


def cancel(
    job_ids: Annotated[
        list[str] | None, typer.Argument(help="Job ids.", metavar="[JOB...]", show_default=False)
    ] = None,
    user: Annotated[
        str | None, typer.Option("--user", "-u", help="Every job of this user (scancel -u).")
    ] = None,
    names: Annotated[
        str | None, typer.Option("--name", "-n", help="Jobs of these names (comma list).")
    ] = None,
    state: Annotated[
        str | None, typer.Option("--state", "-t", help="Only jobs in these states: PD, R, …")
    ] = None,
    me: Annotated[bool, typer.Option("--me", help="Every job of mine (this Unix user's).")] = False,
    json_out: JsonOpt = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Cancel jobs, by id or as scancel selects them (-u, -n, -t, --me; with ids, only those
    that match); one that cannot be cancelled is reported and the others still are."""
    ids = list(job_ids or [])
    user = _me(user, me)
    filtered = user is not None or names is not None or state is not None
    if not ids and not filtered:
        out.fail("name the jobs to cancel: job ids, or -u/-n/-t/--me as scancel", code=2)
    wanted = _slurm_states(state)
    with connect(server, token) as c:
        done, failed = selection.cancel(
            c,
            ids,
            user=user,
            names=names,
            wanted=wanted,
            any_state=state is not None,
            report=out.error,
        )
    if json_out:
        out.emit_json(done)
    else:
        for j in done:
            if j.state in ("STARTING", "RUNNING"):  # the kill is on its way to the tasks
                print(f"job {j.id}: cancelling (its tasks are being stopped)")
            else:
                print(f"job {j.id}: {j.state}")
    if failed:
        raise typer.Exit(1)
