"""``gpufleet reserve``: advance reservations and maintenance windows, as Slurm's ``scontrol
create|show|delete reservation`` (``flags=maint``). Admins create and remove them; everyone may
list them (a job runs in one with ``gpufleet submit --reservation NAME``)."""

from __future__ import annotations

import re
import time
from typing import Annotated, Any

import typer

from gpufleet.cli import output as out
from gpufleet.cli.config import ServerOpt, TokenOpt, connect

JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]
RESV_404 = {404: "check the reservation's name (gpufleet reserve ls)"}
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}

app = typer.Typer(
    no_args_is_help=True,
    help="Reserve nodes for a window of time (maintenance, a team's run): create, ls, show, rm.",
)


def parse_start(text: str, now: float) -> float:
    """``now``, ``now+2hours``, ``02:00`` (the next one), ``2026-12-07T02:00``, epoch seconds:
    the times Slurm's StartTime takes. ``2h`` alone is refused: sacct reads it as 2 h ago."""
    from gpufleet.cli.when import parse_when

    if re.fullmatch(r"\d+(\.\d+)?[smhdw]", text.strip().lower()):
        raise ValueError(f"{text!r}: a start in the future is now+{text.strip()}")
    return parse_when(text, now)


def parse_duration(text: str) -> float:
    """``4h``, ``90m``, ``2d`` or Slurm's Duration (minutes, HH:MM:SS, D-HH:MM:SS)."""
    t = text.strip().lower()
    if m := re.fullmatch(r"(\d+(?:\.\d+)?)([smhdw])", t):
        secs = float(m[1]) * _UNITS[m[2]]
    else:
        from gpufleet.io.slurm_values import time_seconds

        value = time_seconds(t)
        if value == "UNLIMITED":
            raise ValueError(f"{text!r}: a reservation needs an end")
        secs = float(value)
    if secs <= 0:
        raise ValueError(f"{text!r}: must be longer than 0")
    return secs


@app.command("create")
def create(
    nodes: Annotated[str, typer.Option("--nodes", "-n", help="Nodes, as a hostlist: gpu-[3-6].")],
    start: Annotated[
        str, typer.Option("--start", help="now, now+2hours, 02:00, 2026-12-07T02:00 (local).")
    ],
    duration: Annotated[
        str, typer.Option("--duration", "-d", help="4h, 90m, 2d, or Slurm's 4:00:00.")
    ],
    users: Annotated[
        str, typer.Option("--users", "-u", help="Comma list of users who may run jobs in it.")
    ] = "",
    maint: Annotated[
        bool, typer.Option("--maint", help="A maintenance window (Slurm's flags=maint).")
    ] = False,
    name: Annotated[str, typer.Option("--name", help="Its name (default: YOU_N).")] = "",
    json_out: JsonOpt = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Reserve nodes for a window: no job starts there if its time limit would cross it.

    Jobs of --users run in it with --reservation NAME (only on its nodes, only then)."""
    try:
        at = parse_start(start, time.time())
        secs = parse_duration(duration)
    except ValueError as e:
        out.fail(str(e), code=2)
    body: dict[str, Any] = {"nodes": nodes, "start": at, "duration_s": secs, "maint": maint}
    body["users"] = [u.strip() for u in users.split(",") if u.strip()]
    if name:
        body["name"] = name
    with connect(server, token) as c:
        r = c.create_reservation(body)
    if json_out:
        out.emit_json(r)
        return
    print(f"reservation {r.name}: {r.nodes} from {out.when_relative(r.start)} for "
          f"{out.duration(r.duration_s)}")  # fmt: skip
    if r.jobs_crossing:
        out.warn(
            f"running job(s) {', '.join(r.jobs_crossing)} may still run on its nodes when it "
            "starts (their time limit crosses it): drain or cancel them if they must be gone"
        )


@app.command("ls")
def listing(json_out: JsonOpt = False, server: ServerOpt = None, token: TokenOpt = None) -> None:
    """Every reservation, as scontrol show reservation lists them."""
    with connect(server, token) as c:
        rows = c.reservations()
    if json_out:
        out.emit_json(rows)
        return
    now = time.time()
    out.table(
        ["NAME", "STATE", "NODES", "START", "END", "USERS", "FLAGS"],
        [
            [
                r.name,
                r.state,
                r.nodes,
                out.when_relative(r.start, now),
                out.when(r.end, now),
                ",".join(r.users) or "-",
                "MAINT" if r.maint else "",
            ]
            for r in rows
        ],
        empty="no reservations (create one: gpufleet reserve create)",
    )


@app.command("show")
def show(
    name: Annotated[str, typer.Argument(help="The reservation's name.")],
    json_out: JsonOpt = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """One reservation: its nodes, window, users, and running jobs that cross its start."""
    with connect(server, token, RESV_404) as c:
        r = c.reservation(name)
    if json_out:
        out.emit_json(r)
        return
    out.fields(
        [
            ("name", r.name),
            ("state", r.state),
            ("nodes", f"{r.nodes} ({r.node_count})"),
            ("start", out.when_relative(r.start)),
            ("end", out.when_relative(r.end)),
            ("duration", out.duration(r.duration_s)),
            ("users", ",".join(r.users) or "-"),
            ("flags", "MAINT" if r.maint else "-"),
            ("created by", r.created_by),
            ("jobs crossing", ",".join(r.jobs_crossing)),
        ]
    )


@app.command("rm")
def remove(
    name: Annotated[str, typer.Argument(help="The reservation's name.")],
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Remove a reservation: its nodes are everyone's again at the next pass."""
    with connect(server, token, RESV_404) as c:
        c.delete_reservation(name)
    print(f"reservation {name} removed")
