"""What admins do: ``nodes``, ``node``, ``drain``, ``resume``, ``queues``, ``queue``,
``token …``, ``audit``, ``accounts``."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError
from rich.text import Text

from gpufleet.api import schemas as s
from gpufleet.base.secretfile import SecretFileError, write_secret
from gpufleet.cli import output as out
from gpufleet.cli.config import ServerOpt, TokenOpt, connect
from gpufleet.model import replicas

JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]
NODE_404 = {404: "check the node name (gpufleet nodes)"}
STATE_STYLE = {
    "idle": "green",
    "mixed": "cyan",
    "allocated": "blue",
    "drained": "yellow",
    "suspect": "yellow",
}

token_app = typer.Typer(no_args_is_help=True, help="Create, list and revoke API tokens.")


def register(app: typer.Typer) -> None:
    app.command("nodes")(nodes)
    app.command("node")(node)
    app.command("drain")(drain)
    app.command("resume")(resume)
    app.command("queues")(queues)
    app.command("queue")(queue)
    app.add_typer(token_app, name="token")
    app.command("audit")(audit)
    app.command("accounts")(accounts)


def nodes(json_out: JsonOpt = False, server: ServerOpt = None, token: TokenOpt = None) -> None:
    """The nodes, like sinfo: state, free GPUs, CPUs and memory, place in the fabric, why."""
    with connect(server, token) as c:
        rows = c.nodes()
    if json_out:
        out.emit_json(rows)
        return
    now = time.time()
    out.table(
        [
            "NODE",
            "STATE",
            "GPU",
            "GPUS FREE",
            "CPUS FREE",
            "MEM FREE",
            "LEAF",
            "POD",
            "JOBS",
            "WHY",
        ],
        [_node_row(n, now) for n in sorted(rows, key=lambda n: n.name)],
        right=["GPUS FREE", "CPUS FREE", "MEM FREE"],
        empty="no nodes have registered (start one: gpufleet agent)",
    )


def _gpu(n: s.NodeOut) -> str:
    """The node's GPU model, and how many time-sliced replicas each GPU is offered as."""
    per = replicas.of(n.labels.items())
    return f"{n.gpu_model} ×{per} replicas" if per else n.gpu_model


def _node_row(n: s.NodeOut, now: float) -> list[object]:
    why = n.why
    if not why and n.reservation:
        why = f"in {'maintenance' if n.maint else 'reservation'} {n.reservation}"
    if n.state == "lost" and n.last_heartbeat is not None:
        why = why or f"last heartbeat {out.relative(n.last_heartbeat, now)}"
    return [
        n.name,
        Text(n.state, style=STATE_STYLE.get(n.state, "red")),
        _gpu(n),
        f"{out.number(n.gpus_free)}/{n.gpus}",
        f"{out.number(n.cpu_free)}/{out.number(n.cpu_cores)}",
        f"{out.number(n.memory_free_gib)}/{out.number(n.memory_gib)} GiB",
        n.leaf,
        n.pod,
        ",".join(n.jobs),
        why,
    ]


def node(
    name: Annotated[str, typer.Argument(help="Node name.")],
    events: Annotated[int, typer.Option("--events", "-n", help="How many of its events.")] = 30,
    json_out: JsonOpt = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """One node: its state, why (a drain's reason, the heal loop's step or verdict), and its
    history, oldest first (drains, health reports, the heal loop's steps, commands)."""
    with connect(server, token, NODE_404) as c:
        h = c.node_history(name, events)
    if json_out:
        out.emit_json({"node": h.node, "state": h.state, "why": h.why, "events": h.events})
        return
    print(f"node {h.node}: {h.state}" + (f" ({h.why})" if h.why else ""))
    now = time.time()
    out.table(
        ["WHEN", "WHAT", "WHY"],
        [[out.relative(e.time, now), e.what, e.why] for e in h.events],
        empty="no events",
    )


def drain(
    node: Annotated[str, typer.Argument(help="Node name.")],
    reason: Annotated[str, typer.Option("--reason", "-r", help="Why (required, as in scontrol).")],
    deadline: Annotated[
        str | None,
        typer.Option(
            "--deadline",
            help="30m, 2h, or Slurm's 0:30:00: what still runs there then is stopped as a "
            "preemption stops it (each job's checkpoint notice) and requeued.",
        ),
    ] = None,
    json_out: JsonOpt = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Stop placing new work on a node; what runs there keeps running (until --deadline)."""
    if not reason.strip():
        out.fail("--reason must say why the node is drained", code=2)
    deadline_s = None
    if deadline is not None:
        from gpufleet.cli.reserve import parse_duration

        try:
            deadline_s = parse_duration(deadline)
        except ValueError as e:
            out.fail(f"--deadline {deadline}: {e}", code=2)
    with connect(server, token, NODE_404) as c:
        n = c.drain(node, reason, deadline_s)
    _node_done(n, json_out)


def resume(
    node: Annotated[str, typer.Argument(help="Node name.")],
    json_out: JsonOpt = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Let the scheduler place work on a drained node again."""
    with connect(server, token, NODE_404) as c:
        n = c.resume(node)
    _node_done(n, json_out)


def _node_done(n: s.NodeOut, json_out: bool) -> None:
    if json_out:
        out.emit_json(n)
    else:
        print(f"node {n.name}: {n.state}" + (f" ({n.why})" if n.why else ""))


def queues(json_out: JsonOpt = False, server: ServerOpt = None, token: TokenOpt = None) -> None:
    """Queues: quota, GPUs in use (and whether borrowed), jobs, fair share."""
    with connect(server, token) as c:
        rows = c.queues()
    if json_out:
        out.emit_json(rows)
        return
    out.table(
        [
            "QUEUE",
            "COHORT",
            "WEIGHT",
            "QUOTA",
            "USED",
            "BORROWING",
            "PENDING",
            "RUNNING",
            "SHARE",
            "USAGE (share·h)",
            "ENCODERS",
            "SHARES BY",
        ],
        [
            [
                q.name,
                q.cohort,
                out.number(q.weight),
                "-" if q.quota_gpus is None else out.number(q.quota_gpus),
                out.number(q.used_gpus),
                "yes" if q.borrowing else "",
                q.pending,
                q.running,
                f"{q.dominant_share:.1%}",
                # decayed dominant-share·seconds, in hours so that the numbers stay short
                f"{q.fair_share_usage / 3600:,.1f}",
                # its video jobs beside training: its own word ("": the pool's, else the flag's)
                {True: "pack", False: "apart", None: ""}[q.pack_encoders],
                ",".join(q.gpu_sharing),  # the ways its GPU shares may run under ("": any)
            ]
            for q in sorted(rows, key=lambda q: (q.cohort, q.name))
        ],
        right=["WEIGHT", "QUOTA", "USED", "PENDING", "RUNNING", "SHARE", "USAGE (share·h)"],
        empty="no queues",
    )


PACK_CHOICES: dict[str, bool | str] = {"true": True, "false": False, "default": "default"}


def queue(
    name: Annotated[str, typer.Argument(help="Queue name (made if new).")],
    weight: Annotated[float | None, typer.Option(help="Fair-share weight.")] = None,
    cohort: Annotated[str | None, typer.Option(help="The cohort it borrows in.")] = None,
    quota_gpus: Annotated[float | None, typer.Option(help="Its nominal quota of GPUs.")] = None,
    pack_encoders: Annotated[
        str | None,
        typer.Option(
            help="true: its video jobs may use the encoders of GPUs training holds (not on a "
            "pool that says false); false: never; default: as the pool, else the "
            "controller's --pack-encoders, says.",
        ),
    ] = None,
    gpu_sharing: Annotated[
        str | None,
        typer.Option(
            help="The ways of sharing a GPU its jobs' GPU shares may run under: mps, "
            "timeslice or timeslice,mps (the nodes' gpufleet.io/gpu-sharing); any: no limit.",
        ),
    ] = None,
    json_out: JsonOpt = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Change a queue (an admin's): its weight, cohort, quota, encoder packing, GPU sharing."""
    if pack_encoders is not None and pack_encoders not in PACK_CHOICES:
        raise typer.BadParameter(
            f"must be true, false or default, got {pack_encoders!r}", param_hint="--pack-encoders"
        )
    pack = None if pack_encoders is None else PACK_CHOICES[pack_encoders]
    modes = None
    if gpu_sharing is not None:
        modes = [] if gpu_sharing == "any" else [m.strip() for m in gpu_sharing.split(",")]
    given = {
        "weight": weight,
        "cohort": cohort,
        "quota_gpus": quota_gpus,
        "pack_encoders": pack,
        "gpu_sharing": modes,
    }
    try:
        body = s.QueueUpdate.model_validate({k: v for k, v in given.items() if v is not None})
    except ValidationError as e:  # every problem at once, as the API's 422 says them
        said = (
            f"--{str(x['loc'][0]).replace('_', '-')}: {x['msg'].removeprefix('Value error, ')}"
            for x in e.errors()
        )
        raise typer.BadParameter("; ".join(said)) from None
    if not body.model_dump(exclude_none=True):
        raise typer.BadParameter("nothing to change: give an option (gpufleet queue --help)")
    with connect(server, token) as c:
        q = c.update_queue(name, body)
    if json_out:
        out.emit_json(q)
        return
    packs = {True: "packed beside training", False: "kept apart from training"}
    print(
        f"queue {q.name}: weight {out.number(q.weight)}"
        + (f", cohort {q.cohort}" if q.cohort else "")
        + ("" if q.quota_gpus is None else f", quota {out.number(q.quota_gpus)} GPUs")
        + (
            f", video jobs {packs[q.pack_encoders]}"
            if q.pack_encoders is not None
            else ", video jobs as the pool or controller says"
        )
        + (f", GPU shares only by {' or '.join(q.gpu_sharing)}" if q.gpu_sharing else "")
    )


@token_app.command("create")
def token_create(
    name: Annotated[str, typer.Argument(help="A name to list and revoke it by.")],
    role: Annotated[
        str,
        typer.Option(
            "--role", help="user, admin, agent, or metrics (reads /metrics only: Prometheus's)."
        ),
    ],
    user: Annotated[str | None, typer.Option("--user", help="User tokens: whose jobs.")] = None,
    node: Annotated[str | None, typer.Option("--node", help="Agent tokens: its node.")] = None,
    out_file: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="Write the secret to this new file (mode 0600) instead of printing it.",
            show_default=False,
        ),
    ] = None,
    json_out: JsonOpt = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Create a token; its secret is printed once (or written to --out FILE, mode 0600)."""
    if role not in ("user", "admin", "agent", "metrics"):
        out.fail(f"--role {role}: expected user, admin, agent or metrics", code=2)
    if role == "agent" and not node:
        out.fail("an agent token needs --node NODE: it may report for that node only", code=2)
    if role == "user" and not user:
        out.fail("a user token needs --user USER: the user whose jobs it touches", code=2)
    if node and role != "agent":
        out.fail("--node is for agent tokens (--role agent)", code=2)
    if out_file is not None and out_file.exists():  # before the token exists, not after
        out.fail(f"--out {out_file}: exists", "remove it or choose another file", code=2)
    req = s.TokenCreate(name=name, role=role, user=user, node=node)  # type: ignore[arg-type]
    with connect(server, token, {409: "a token by that name exists: pick another name"}) as c:
        t = c.create_token(req)
    if out_file is not None:
        try:
            write_secret(out_file, t.token or "")
        except (OSError, SecretFileError) as e:
            out.fail(
                f"--out {out_file}: cannot write it ({e}); token {t.name} was created",
                f"revoke it (gpufleet token revoke {t.name}) and create it again",
            )
        t = t.model_copy(update={"token": None})  # the secret is in the file, not on stdout
        if json_out:
            out.emit_json(t)
            return
        out.note(f"token {t.name} ({t.role}) created; its secret is in {out_file} (mode 0600)")
        return
    if json_out:
        out.emit_json(t)
        return
    print(t.token or "")
    out.note(f"token {t.name} ({t.role}) created; it is shown only now: store it safely")


@token_app.command("list")
def token_list(json_out: JsonOpt = False, server: ServerOpt = None, token: TokenOpt = None) -> None:
    """The tokens (never their secrets)."""
    with connect(server, token) as c:
        rows = c.tokens()
    if json_out:
        out.emit_json(rows)
        return
    out.table(
        ["NAME", "ROLE", "USER", "NODE"],
        [[t.name, t.role, t.user or "", t.node or ""] for t in rows],
        empty="no tokens",
    )


@token_app.command("revoke")
def token_revoke(
    name: Annotated[str, typer.Argument(help="Token name.")],
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Revoke a token: requests that carry it are refused from now on."""
    with connect(server, token, {404: "check the name (gpufleet token list)"}) as c:
        c.revoke_token(name)
    print(f"token {name}: revoked")


def audit(
    limit: Annotated[int, typer.Option("--limit", "-n", min=1, max=10000)] = 100,
    json_out: JsonOpt = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """The latest changes: who did what to what."""
    with connect(server, token) as c:
        rows = c.audit(limit)
    if json_out:
        out.emit_json(rows)
        return
    now = time.time()
    out.table(
        ["TIME", "ACTOR", "ACTION", "TARGET", "DETAIL"],
        [[out.when(a.time, now), a.actor, a.action, a.target, _detail(a.detail)] for a in rows],
        empty="nothing in the audit log",
    )


def _detail(d: dict[str, object]) -> str:
    return " ".join(f"{k}={v if isinstance(v, str) else json.dumps(v)}" for k, v in d.items())


def accounts(
    user: Annotated[str, typer.Argument(help="The user (its Unix account's name).")],
    json_out: JsonOpt = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """What the nodes say of a user's Unix account: its UID on each, or none (ADR 0037)."""
    with connect(server, token) as c:
        got = c.user_accounts(user)
    if json_out:
        out.emit_json(got)
        return
    rows: list[list[object]] = [
        [n, str(uid) if uid is not None else Text("no account", style="red")]
        for n, uid in got.nodes.items()
    ]
    rows += [[n, Text("not answered", style="yellow")] for n in got.not_answered]
    out.table(["NODE", "UID"], rows, empty="no node runs tasks as their owners: none is asked")
    if got.uid_mismatch:
        out.warn(got.uid_mismatch)
