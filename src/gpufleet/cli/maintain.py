"""``gpufleet maintain``: rolling maintenance with validation and rollback. The controller drives
each rollout (it goes on if this command is interrupted, and after a controller restart); this
command starts one and follows its progress, a bar per batch.

    gpufleet maintain --nodes 'node-[0-15]' --batch 25% --run 'apt-get -y upgrade' \\
        --validate device,storage --rollback 'apt-get -y install pkg=OLD' --canary 1 --soak 10m
    gpufleet maintain --nodes all --batch 4 --agent-upgrade
    gpufleet maintain status [ID]     gpufleet maintain confirm ID     gpufleet maintain cancel ID
"""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer

from gpufleet.cli import output as out
from gpufleet.cli.config import ServerOpt, TokenOpt, connect

JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]
M_404 = {404: "check the rollout's id (gpufleet maintain status)"}
ENDS = ("done", "failed", "cancelled")
BAR = 20

app = typer.Typer(
    help="Roll maintenance over nodes in batches: drain, run, validate, return; or roll back.",
)


def _seconds(text: str, what: str) -> float:
    from gpufleet.cli.reserve import parse_duration

    try:
        return parse_duration(text)
    except ValueError as e:
        out.fail(f"{what}: {e}", code=2)


@app.callback(invoke_without_command=True)
def maintain(
    ctx: typer.Context,
    nodes: Annotated[
        str, typer.Option("--nodes", "-n", help="A hostlist (node-[0-15]) or all.")
    ] = "",
    batch: Annotated[
        str, typer.Option("--batch", help="Per batch: 10% of the nodes, or 4.")
    ] = "10%",
    run: Annotated[str, typer.Option("--run", help="The command run on each node (as root).")] = "",
    validate: Annotated[
        str, typer.Option("--validate", help="Layers checked on each node: device,network,storage.")
    ] = "",
    max_failures: Annotated[
        int, typer.Option("--max-failures", help="Failed nodes tolerated before it stops.")
    ] = 0,
    rollback: Annotated[
        str, typer.Option("--rollback", help="Run on a node that failed (it stays drained).")
    ] = "",
    deadline: Annotated[
        str, typer.Option("--deadline", help="Past this, a draining node's jobs are requeued.")
    ] = "",
    canary: Annotated[int, typer.Option("--canary", help="Nodes in a first batch alone.")] = 0,
    soak: Annotated[
        str, typer.Option("--soak", help="After the canary, wait this long (else: confirm).")
    ] = "",
    window: Annotated[
        str, typer.Option("--window", help="A reservation: batches start only while it is open.")
    ] = "",
    agent_upgrade: Annotated[
        bool, typer.Option("--agent-upgrade", help="Restart the agents (tasks keep running).")
    ] = False,
    python: Annotated[
        str, typer.Option("--python", help="With --agent-upgrade: the new install's Python.")
    ] = "",
    timeout: Annotated[str, typer.Option("--timeout", help="Each command's bound.")] = "1h",
    detach: Annotated[
        bool, typer.Option("--detach", help="Start it and return (the controller drives it).")
    ] = False,
    json_out: JsonOpt = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Start a rolling maintenance and follow it (Ctrl-C leaves it running)."""
    if ctx.invoked_subcommand is not None:
        return
    if not nodes:
        out.fail("give the nodes: --nodes 'node-[0-15]' (or all)", code=2)
    body: dict[str, Any] = {
        "nodes": nodes,
        "batch": batch,
        "run": run,
        "rollback": rollback,
        "validate_layers": [x.strip() for x in validate.split(",") if x.strip()],
        "max_failures": max_failures,
        "canary": canary,
        "agent_upgrade": agent_upgrade,
        "python": python,
        "timeout_s": _seconds(timeout, "--timeout"),
    }
    if deadline:
        body["deadline_s"] = _seconds(deadline, "--deadline")
    if soak:
        body["soak_s"] = _seconds(soak, "--soak")
    if window:
        body["window"] = window
    with connect(server, token) as c:
        m = c.start_maintenance(body)
        if json_out and detach:
            out.emit_json(m)
            return
        print(f"maintenance {m.id}: {m.what} on {len(m.nodes)} nodes in {m.batches} batches")
        if detach:
            print(f"follow it: gpufleet maintain status {m.id}")
            return
        m = follow(c, m.id)
    if json_out:
        out.emit_json(m)
    if m.state not in ("done", "awaiting confirmation"):
        raise typer.Exit(1)


def resolve(c: Any, mid: str) -> str:
    """``last``: the newest rollout's id."""
    if mid != "last":
        return mid
    rows = c.maintenances()
    if not rows:
        out.fail("no maintenance yet (start one: gpufleet maintain --nodes ... --run ...)")
    return str(max(rows, key=lambda m: m.started).id)


def follow(c: Any, mid: str, every_s: float = 1.0) -> Any:
    """Print its progress whenever it changes, until it ends or awaits a confirmation."""
    shown = ""
    while True:
        m = c.maintenance(mid)
        text = render(m)
        if text != shown:
            print(text, flush=True)
            shown = text
        if m.state in ENDS:
            return m
        if m.state == "awaiting confirmation":
            print(f"confirm the canary: gpufleet maintain confirm {mid}", flush=True)
            return m
        time.sleep(every_s)


def render(m: Any) -> str:
    """A bar per batch started, then the rollout's state (and failed nodes' reasons)."""
    lines = []
    for b in range(1, m.batches + 1):
        mine = [n for n in m.nodes if n.batch == b]
        if b > m.batch or not mine:
            continue
        ended = sum(1 for n in mine if n.phase in ("done", "failed", "rolled back"))
        fill = BAR * ended // len(mine)
        phases = ", ".join(f"{n.node} {n.phase}" for n in mine)
        canary = " canary" if b == 1 and m.canary else ""
        lines.append(
            f"batch {b}/{m.batches}{canary} [{'#' * fill}{'.' * (BAR - fill)}] "
            f"{ended}/{len(mine)}  {phases}"
        )
    for n in m.nodes:
        if n.why:
            lines.append(f"  {n.node}: {n.why}")
    state = m.state + (f": {m.why}" if m.why else "")
    lines.append(f"maintenance {m.id} {state} ({m.failures} failed of at most {m.max_failures})")
    return "\n".join(lines)


@app.command("status")
def status(
    mid: Annotated[str, typer.Argument(help="A rollout's id, or last (default: all).")] = "",
    json_out: JsonOpt = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Every rollout, or one with a bar per batch."""
    with connect(server, token, M_404) as c:
        if mid:
            m = c.maintenance(resolve(c, mid))
            if json_out:
                out.emit_json(m)
            else:
                print(render(m))
            return
        rows = c.maintenances()
    if json_out:
        out.emit_json(rows)
        return
    out.table(
        ["ID", "STATE", "WHAT", "BATCH", "NODES", "FAILED", "STARTED"],
        [
            [
                m.id,
                m.state,
                m.what,
                f"{m.batch}/{m.batches}",
                len(m.nodes),
                m.failures,
                out.when(m.started),
            ]
            for m in rows
        ],
        empty="no maintenance (start one: gpufleet maintain --nodes ... --run ...)",
    )


@app.command("confirm")
def confirm(
    mid: Annotated[str, typer.Argument(help="The rollout's id, or last.")],
    follow_on: Annotated[bool, typer.Option("--follow/--no-follow", help="Follow it on.")] = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """The canary is good: the other batches follow."""
    with connect(server, token, M_404) as c:
        m = c.confirm_maintenance(resolve(c, mid))
        print(f"maintenance {m.id}: canary confirmed; {m.state}")
        if follow_on and follow(c, m.id).state != "done":
            raise typer.Exit(1)


@app.command("cancel")
def cancel(
    mid: Annotated[str, typer.Argument(help="The rollout's id, or last.")],
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """No further step starts; nodes under maintenance stay drained (resume them by hand)."""
    with connect(server, token, M_404) as c:
        m = c.cancel_maintenance(resolve(c, mid))
    print(f"maintenance {m.id}: {m.state}")
