"""``gpufleet service run|ls|show|update|scale|token|rm``: long-running services (``kind:
service``), their replicas and probe states, through ``/api/v1/services``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer

from gpufleet.cli import output as out
from gpufleet.cli.config import ServerOpt, TokenOpt, connect

app = typer.Typer(
    no_args_is_help=True,
    help="Run, list, show, update, scale and remove services; renew an endpoint's token.",
)
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]
FileOpt = Annotated[Path | None, typer.Option("--file", "-f", help="A service YAML.")]
ImageOpt = Annotated[
    str | None, typer.Option("--image", help="Run each replica in this container image.")
]
EnvOpt = Annotated[list[str] | None, typer.Option("--env", help="KEY=VALUE (repeatable).")]
TokenFileOpt = Annotated[
    Path | None,
    typer.Option(
        "--save-token",
        help="Write the endpoint's token to this new file (0600) instead of printing it.",
    ),
]
HINTS = {404: "check: gpufleet service ls", 409: "pick another name, or: gpufleet service update"}


def _yaml(file: Path) -> dict[str, Any]:
    from gpufleet.io.specs import load_yaml  # yaml: only for -f FILE
    from gpufleet.model.errors import SpecError

    try:
        data = load_yaml(file)
    except SpecError as e:
        out.fail(str(e), code=2)
    if isinstance(data, dict) and data.get("kind") == "service":
        data = {k: v for k, v in data.items() if k != "kind"}
    if not isinstance(data, dict):
        out.fail(f"{file}: expected a mapping (a service spec)", code=2)
    return dict(data)


def _env(pairs: list[str] | None) -> dict[str, str]:
    env: dict[str, str] = {}
    for p in pairs or []:
        k, sep, v = p.partition("=")
        if not sep or not k:
            out.fail(f"--env {p!r}: expected KEY=VALUE", code=2)
        env[k] = v
    return env


def _replica(
    command: list[str] | None,
    gpus: int | None,
    image: str | None,
    env: list[str] | None,
    queue: str | None,
) -> dict[str, Any]:
    r: dict[str, Any] = {}
    if command:
        r["command"] = list(command)
    if gpus is not None:
        r["gpus_per_worker"] = gpus
    if image is not None:
        r["container"] = {"image": image}
    if env:
        r["env"] = _env(env)
    if queue is not None:
        r["queue"] = queue
    return r


@app.command("run")
def run(
    args: Annotated[
        list[str] | None,
        typer.Argument(help="NAME, then the command after --.", show_default=False),
    ] = None,
    file: FileOpt = None,
    replicas: Annotated[int | None, typer.Option("--replicas", min=0)] = None,
    port: Annotated[
        int | None, typer.Option("--port", min=1, max=65535, help="Default: one free each.")
    ] = None,
    gpus: Annotated[int | None, typer.Option("--gpus", min=0, help="GPUs per replica.")] = None,
    image: ImageOpt = None,
    env: EnvOpt = None,
    queue: Annotated[str | None, typer.Option("--queue", "-p")] = None,
    token_file: TokenFileOpt = None,
    json_out: JsonOpt = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Start a service: -f svc.yaml, or NAME --replicas N --port P --gpus G -- CMD...
    Prints its endpoint and the endpoint's token, which is shown this once."""
    spec: dict[str, Any] = _yaml(file) if file is not None else {}
    rest = list(args or [])
    if rest:
        spec["name"] = rest.pop(0)
    if "name" not in spec:
        out.fail("give the service's NAME (or -f FILE with a name)", code=2)
    if replicas is not None:
        spec["replicas"] = replicas
    if port is not None:
        spec["port"] = port
    given = _replica(rest, gpus, image, env, queue)
    rep = spec.get("replica")
    if given or rep is None:
        base = dict(rep) if isinstance(rep, dict) else {}
        if "env" in given and isinstance(base.get("env"), dict):
            given["env"] = {**base["env"], **given["env"]}
        spec["replica"] = {**base, **given}
    sink = _token_sink(token_file)
    with connect(server, token, HINTS) as c:
        svc = _keep_token(c.create_service(spec), sink)
    if json_out:
        out.emit_json(svc)
        return
    ids = ", ".join(r.job_id for r in svc.replicas) or "none yet"
    print(f"service {svc.name}: {svc.desired} replica(s) ({ids})")
    _print_endpoint(svc, token_file)


def _token_sink(path: Path | None) -> int | None:
    """``--save-token``'s new file (0600), opened before the request: a file that cannot be
    made fails the command before a token exists that nobody could see."""
    if path is None:
        return None
    try:
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as err:
        out.fail(f"--save-token {path}: {err.strerror}", code=2)


def _keep_token(svc: Any, fd: int | None) -> Any:
    """The token into ``fd`` (closed here): the answer without it."""
    if fd is None:
        return svc
    e = svc.endpoint
    with os.fdopen(fd, "w") as f:
        if e is not None and e.token is not None:
            f.write(e.token + "\n")
    if e is None:
        return svc
    return svc.model_copy(update={"endpoint": e.model_copy(update={"token": None})})


def _print_endpoint(svc: Any, token_file: Path | None) -> None:
    e = svc.endpoint
    if e is None:
        print("endpoint: none (the controller runs no gateway)")
        return
    print(f"endpoint: {e.url}")
    if token_file is not None:
        print(f"token:    in {token_file}")
    elif e.token is not None:
        print(f"token:    {e.token}")
        print("          (shown this once; gpufleet service token NAME makes a new one)")
    print(f"try:      curl -H 'Authorization: Bearer <token>' {e.url}/")


def _status(s: Any) -> str:
    if s.deleting:
        return "deleting"
    if s.rolling_out:
        return f"rolling out (from {s.previous_generation})"
    return "ready" if s.ready >= s.desired else "starting"


def _what(s: Any) -> str:
    return s.image or " ".join(s.command)


@app.command("ls")
def ls(json_out: JsonOpt = False, server: ServerOpt = None, token: TokenOpt = None) -> None:
    """The services this token may see: replicas ready of desired, generation, request rate."""
    with connect(server, token) as c:
        rows = c.services()
    if json_out:
        out.emit_json(rows)
        return
    out.table(
        ["NAME", "USER", "READY", "GEN", "REQ/S", "STATUS", "ENDPOINT", "RUNS"],
        [
            [
                s.name,
                s.user,
                f"{s.ready}/{s.desired}",
                s.generation,
                "-" if s.request_rate is None else out.number(s.request_rate),
                _status(s),
                s.endpoint.url if s.endpoint is not None else "-",
                _what(s)[:60],
            ]
            for s in rows
        ],
        right=("READY", "GEN", "REQ/S"),
        empty="no services",
    )


@app.command("show")
def show(
    name: Annotated[str, typer.Argument(help="The service's name.")],
    json_out: JsonOpt = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """One service: its settings, each replica (job, node, port, state, probes) and its events."""
    with connect(server, token, HINTS) as c:
        s = c.service(name)
    if json_out:
        out.emit_json(s)
        return
    auto = s.autoscale
    out.fields(
        [
            ("name", s.name),
            ("user", s.user),
            ("queue", s.queue),
            ("status", _status(s)),
            ("replicas", f"{s.ready} ready, {s.live} live, {s.desired} desired"),
            (
                "autoscale",
                None
                if auto is None
                else f"{auto['min']:g}-{auto['max']:g} at {auto['target_qps_per_replica']:g} "
                "req/s per replica",
            ),
            ("request rate", None if s.request_rate is None else f"{s.request_rate:g} req/s"),
            ("generation", s.generation),
            ("endpoint", s.endpoint.url if s.endpoint is not None else "none (no gateway)"),
            ("port", s.port or "one free port each ($PORT)"),
            ("runs", _what(s)),
            ("note", s.note),
        ]
    )
    out.table(
        ["REPLICA", "GEN", "STATE", "NODE", "PORT", "READY", "READINESS", "LIVENESS"],
        [
            [
                r.job_id,
                r.generation,
                r.state + (" (stopping)" if r.stopping else ""),
                r.node or "-",
                r.port or "-",
                ("yes" if r.routed in (True, None) else "yes, reloading") if r.ready else "no",
                r.readiness,
                r.liveness,
            ]
            for r in s.replicas
        ],
        right=("GEN", "PORT"),
        empty="no replicas",
    )
    out.events_table(s.events)


@app.command("update")
def update(
    name: Annotated[str, typer.Argument(help="The service's name.")],
    file: Annotated[
        Path | None, typer.Option("--file", "-f", help="The whole new spec (a YAML).")
    ] = None,
    image: ImageOpt = None,
    env: EnvOpt = None,
    gpus: Annotated[int | None, typer.Option("--gpus", min=0)] = None,
    command: Annotated[
        list[str] | None, typer.Argument(help="A new command, after --.", show_default=False)
    ] = None,
    json_out: JsonOpt = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Change a service: a new replica (image, env, command, GPUs) rolls out replica by
    replica, new ones ready before old ones stop; a failed rollout rolls back by itself."""
    replica = _replica(command, gpus, image, env, None)
    if file is not None and replica:
        out.fail("give -f FILE or --image/--env/--gpus/CMD, not both", code=2)
    if file is None and not replica:
        out.fail("nothing to change: give -f FILE, --image, --env, --gpus or -- CMD", code=2)
    with connect(server, token, HINTS) as c:
        if file is not None:
            s = c.update_service(name, _yaml(file), replace=True)
        else:
            s = c.update_service(name, {"replica": replica})
    if json_out:
        out.emit_json(s)
        return
    what = f"rolling out generation {s.generation}" if s.rolling_out else "updated"
    print(f"service {s.name}: {what}")


@app.command("scale")
def scale(
    name: Annotated[str, typer.Argument(help="The service's name.")],
    replicas: Annotated[int | None, typer.Argument(min=0, help="How many replicas.")] = None,
    lo: Annotated[int | None, typer.Option("--min", min=0, help="Autoscaling's least.")] = None,
    hi: Annotated[int | None, typer.Option("--max", min=1, help="Autoscaling's most.")] = None,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Set the number of replicas, or the autoscaler's --min/--max."""
    if replicas is None and lo is None and hi is None:
        out.fail("give a number of replicas, or --min/--max", code=2)
    with connect(server, token, HINTS) as c:
        s = c.scale_service(name, replicas, minimum=lo, maximum=hi)
    print(f"service {s.name}: {s.desired} replica(s) desired")


@app.command("token")
def rotate_token(
    name: Annotated[str, typer.Argument(help="The service's name.")],
    token_file: TokenFileOpt = None,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Make a new token for the service's endpoint (the old one stops working) and show it
    this once."""
    sink = _token_sink(token_file)
    with connect(server, token, HINTS) as c:
        s = _keep_token(c.rotate_service_token(name), sink)
    _print_endpoint(s, token_file)


@app.command("rm")
def rm(
    name: Annotated[str, typer.Argument(help="The service's name.")],
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Remove a service: its replicas leave the routes, then stop."""
    with connect(server, token, HINTS) as c:
        c.delete_service(name)
    print(f"service {name}: removing")
