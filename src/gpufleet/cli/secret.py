"""``gpufleet secret create|ls|rm``: job secrets. A value comes from stdin or ``--from-file``,
never from the command line (every local user can read a process's arguments), and no
command ever prints one. Also the parsing of ``submit --secret/--secret-file``."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from gpufleet.cli import output as out
from gpufleet.cli.config import ServerOpt, TokenOpt, connect
from gpufleet.model.secrets import MAX_SECRET_VALUE, default_env

app = typer.Typer(
    no_args_is_help=True,
    help="Create, list and remove job secrets (values from stdin or a file, never argv).",
)
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]
QueueOpt = Annotated[
    str | None, typer.Option("--queue", help="A queue's secret, for its jobs (admins).")
]
ClusterOpt = Annotated[
    bool, typer.Option("--cluster", help="A cluster secret, for every job (admins).")
]
UserOpt = Annotated[
    str | None, typer.Option("--user", help="Whose secret (admins; a user token: its own).")
]
HINTS = {409: "it exists: give --update to replace its value", 404: "check: gpufleet secret ls"}


def _scope(queue: str | None, cluster: bool) -> Literal["user", "queue", "cluster"]:
    if queue and cluster:
        out.fail("give --queue Q or --cluster, not both", code=2)
    return "queue" if queue else "cluster" if cluster else "user"


def _read_value(from_file: Path | None) -> str:
    """The file's text exactly; or stdin's, less one final newline (``echo`` adds it)."""
    if from_file is not None:
        try:
            data = from_file.read_bytes()
        except OSError as e:
            out.fail(f"--from-file {from_file}: cannot read it: {e.strerror or e}", code=2)
    else:
        if sys.stdin.isatty():
            import getpass  # a terminal: ask without echoing it

            data = getpass.getpass("secret value (not shown): ").encode()
        else:
            data = sys.stdin.buffer.read()
            data = data.removesuffix(b"\n").removesuffix(b"\r")
    where = f"--from-file {from_file}" if from_file else "stdin"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        out.fail(f"{where}: the value must be UTF-8 text", code=2)
    if not text:
        out.fail(f"{where}: the value is empty", code=2)
    if "\0" in text:
        out.fail(f"{where}: the value holds a NUL byte", code=2)
    if len(text) > MAX_SECRET_VALUE:
        out.fail(f"{where}: at most {MAX_SECRET_VALUE} characters, got {len(text)}", code=2)
    return text


@app.command("create")
def create(
    name: Annotated[str, typer.Argument(help="The secret's name (letters, digits, _ . -).")],
    from_file: Annotated[
        Path | None, typer.Option("--from-file", help="Read the value from this file.")
    ] = None,
    queue: QueueOpt = None,
    cluster: ClusterOpt = False,
    user: UserOpt = None,
    update: Annotated[bool, typer.Option("--update", help="Replace an existing value.")] = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Create a secret; its value is read from stdin (or --from-file) and never shown again."""
    from pydantic import ValidationError

    from gpufleet.api.secrets import SecretCreate

    scope = _scope(queue, cluster)
    value = _read_value(from_file)
    try:
        req = SecretCreate(
            name=name, scope=scope, queue=queue, user=user, value=value, replace=update
        )
    except ValidationError as e:  # its messages never quote the value (repr=False)
        problems = "; ".join(f"{'.'.join(map(str, x['loc']))}: {x['msg']}" for x in e.errors())
        out.fail(problems, code=2)
    with connect(server, token, HINTS) as c:
        s = c.create_secret(req)
    owner = f" of {s.owner}" if s.owner else ""
    print(f"secret {s.name} ({s.scope}{owner}) {'updated' if update else 'created'}")


@app.command("ls")
def ls(
    queue: QueueOpt = None,
    cluster: ClusterOpt = False,
    json_out: JsonOpt = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """The secrets this token may see: names, scope, owner, times; never a value."""
    scope = None if not (queue or cluster) else _scope(queue, cluster)
    with connect(server, token) as c:
        rows = c.secrets(scope)
    if queue:
        rows = [r for r in rows if r.owner == queue]
    if json_out:
        out.emit_json(rows)
        return
    now = time.time()
    out.table(
        ["NAME", "SCOPE", "OWNER", "CREATED", "UPDATED", "LAST USED"],
        [
            [
                r.name,
                r.scope,
                r.owner,
                out.when_relative(r.created_time, now),
                out.when_relative(r.updated_time, now),
                out.when_relative(r.last_used_time, now) if r.last_used_time else "never",
            ]
            for r in rows
        ],
        empty="no secrets",
    )


@app.command("rm")
def rm(
    name: Annotated[str, typer.Argument(help="The secret's name.")],
    queue: QueueOpt = None,
    cluster: ClusterOpt = False,
    user: UserOpt = None,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Remove a secret. Jobs that name it and have not started yet fail, saying so."""
    scope = _scope(queue, cluster)
    with connect(server, token, HINTS) as c:
        c.delete_secret(name, scope, user=user, queue=queue)
    print(f"secret {name}: removed")


def refs(env_flags: list[str] | None, file_flags: list[str] | None) -> list[dict[str, Any]]:
    """``submit --secret NAME[:VAR]`` and ``--secret-file NAME[:FILE]`` as the spec's
    ``secrets`` (VAR: NAME upper-cased, '-' and '.' as '_'; FILE: NAME)."""
    out_refs: list[dict[str, Any]] = []
    for flag in env_flags or []:
        name, _, var = flag.partition(":")
        out_refs.append({"name": name, "env": var or default_env(name)})
    for flag in file_flags or []:
        name, _, file = flag.partition(":")
        out_refs.append({"name": name, "file": file or name})
    return out_refs
