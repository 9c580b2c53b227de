"""``gpufleet desktop run|ls|show|rm``: remote desktop sessions, one per user and name, each a
service of one replica (``desktop`` in its spec: model/service.py) running an X server, a VNC
server and noVNC's browser client (``gpufleet.ops.desktop``) on one GPU or a share of one.
Its owner (and admins) open it in a browser through the service gateway with their own
gpufleet token; an idle one is suspended (scaled to 0) and ``desktop run`` resumes it."""

from __future__ import annotations

import os
import re
import time
from typing import Annotated, Any

import typer

from gpufleet.cli import output as out
from gpufleet.cli.config import ServerOpt, TokenOpt, connect

app = typer.Typer(no_args_is_help=True, help="Run, list, show and remove desktop sessions.")
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]
NameArg = Annotated[str, typer.Argument(help="The desktop's name (a service name).")]
HINTS = {404: "check: gpufleet desktop ls", 409: "pick another name"}
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhd]?)$")
_UNIT = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def seconds(text: str) -> float:
    """``90``, ``90s``, ``30m``, ``2h``, ``1d``."""
    m = _DURATION.match(text.strip())
    if m is None:
        out.fail(f"--idle {text!r}: give a duration such as 1800, 30m or 2h", code=2)
    return float(m.group(1)) * _UNIT[m.group(2)]


def spec_of(
    name: str,
    *,
    gpus: int,
    share: int | None,
    graphics: bool,
    idle_s: float,
    geometry: str,
    program: str,
    python: str,
    queue: str | None,
) -> dict[str, Any]:
    """The service spec of a desktop session."""
    command = [python, "-m", "gpufleet.ops.desktop", "--geometry", geometry]
    if program:
        command += ["--run", program]
    # the session finds python3 and the X programs on the caller's PATH, as sbatch's jobs do
    path = {"PATH": os.environ["PATH"]} if os.environ.get("PATH") else {}
    replica: dict[str, Any] = {"command": command, "gpus_per_worker": gpus, "submit_env": path}
    if share is not None:
        replica |= {"gpus_per_worker": 1, "gpu_milli": share}
    if graphics:
        replica["gpu_engines"] = {"graphics": 1}
    if queue is not None:
        replica["queue"] = queue
    return {
        "name": name,
        "replicas": 1,
        "replica": replica,
        "desktop": {"idle_suspend_s": idle_s, "geometry": geometry},
        # the session's door answers this (without its key) once websockify listens, which is
        # after the X and VNC servers (ops/desktop_key.py)
        "readiness": {
            "http": {"path": "/.gpufleet/ready"},
            "period_s": 0.5,
            "failure_threshold": 1,
        },
    }


def status(s: Any) -> str:
    if s.deleting:
        return "removing"
    if s.desktop is not None and s.desktop.suspended:
        return "suspended"
    return "ready" if s.ready >= s.desired else "starting"


def _wait_ready(c: Any, name: str, timeout_s: float) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        s = c.service(name)
        if status(s) == "ready" or time.monotonic() > deadline:
            return s
        time.sleep(0.2)


@app.command("run")
def run(
    name: NameArg,
    gpus: Annotated[int, typer.Option("--gpus", min=0, help="Whole GPUs.")] = 1,
    share: Annotated[
        int | None,
        typer.Option("--gpu-share", min=1, max=999, help="A share of one GPU, in thousandths."),
    ] = None,
    graphics: Annotated[
        bool, typer.Option("--graphics", help="Only a GPU with graphics (driver: graphics).")
    ] = False,
    idle: Annotated[str, typer.Option("--idle", help="Suspend after this long unused.")] = "30m",
    geometry: Annotated[str, typer.Option("--geometry", help="WIDTHxHEIGHT")] = "1280x800",
    program: Annotated[str, typer.Option("--run", help="A program to start on it.")] = "",
    python: Annotated[str, typer.Option("--python", help="The nodes' Python.")] = "python3",
    queue: Annotated[str | None, typer.Option("--queue", "-p")] = None,
    wait: Annotated[
        float, typer.Option("--wait", min=0, help="Seconds to wait until it is ready.")
    ] = 0.0,
    json_out: JsonOpt = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Start a desktop session (or resume a suspended one of yours) and print where to open
    it: a browser page on the gateway that asks for your own gpufleet token."""
    spec = spec_of(
        name,
        gpus=gpus,
        share=share,
        graphics=graphics,
        idle_s=seconds(idle),
        geometry=geometry,
        program=program,
        python=python,
        queue=queue,
    )
    with connect(server, token, HINTS) as c:
        mine = {s.name: s for s in c.services()}
        old = mine.get(name)
        if old is not None and old.desktop is not None and old.desktop.suspended:
            c.scale_service(name, 1)
            what = "resuming"
        else:
            c.create_service(spec)
            what = "starting"
        s = _wait_ready(c, name, wait) if wait else c.service(name)
    if json_out:
        out.emit_json(s)
        return
    print(f"desktop {name}: {status(s) if wait else what}")
    url = s.desktop.open_url if s.desktop is not None else None
    print(f"open:    {url or 'none (the controller runs no gateway)'}")
    print("         (sign in with your own gpufleet token; only you and admins can)")


@app.command("ls")
def ls(json_out: JsonOpt = False, server: ServerOpt = None, token: TokenOpt = None) -> None:
    """The desktop sessions this token may see."""
    with connect(server, token) as c:
        rows = [s for s in c.services() if s.desktop is not None]
    if json_out:
        out.emit_json(rows)
        return
    out.table(
        ["NAME", "USER", "STATUS", "NODE", "IDLE LIMIT", "OPEN"],
        [
            [
                s.name,
                s.user,
                status(s),
                ",".join(r.node for r in s.replicas if r.node) or "-",
                f"{d.idle_suspend_s:g} s",
                d.open_url or "-",
            ]
            for s in rows
            if (d := s.desktop) is not None
        ],
        empty="no desktops",
    )


@app.command("show")
def show(
    name: NameArg, json_out: JsonOpt = False, server: ServerOpt = None, token: TokenOpt = None
) -> None:
    """One desktop session: its state, where to open it, its replica and its events."""
    with connect(server, token, HINTS) as c:
        s = c.service(name)
    if s.desktop is None:
        out.fail(f"{name} is a service, not a desktop: gpufleet service show {name}", code=2)
    if json_out:
        out.emit_json(s)
        return
    d = s.desktop
    node = ",".join(f"{r.node} ({r.state})" for r in s.replicas if r.node) or "-"
    out.fields(
        [
            ("name", s.name),
            ("user", s.user),
            ("status", status(s)),
            ("node", node),
            ("screen", d.geometry),
            ("idle limit", f"{d.idle_suspend_s:g} s, then suspended"),
            ("open", d.open_url or "none (no gateway)"),
        ]
    )
    out.events_table(s.events)


@app.command("rm")
def rm(name: NameArg, server: ServerOpt = None, token: TokenOpt = None) -> None:
    """End a desktop session: its X session stops and its GPU is freed."""
    with connect(server, token, HINTS) as c:
        if c.service(name).desktop is None:
            out.fail(f"{name} is a service, not a desktop: gpufleet service rm {name}", code=2)
        c.delete_service(name)
    print(f"desktop {name}: removing")
