"""``gpufleet setup controller|node|path``: a host's files, written idempotently (a second
run changes nothing and says so), then what to do next (ADR 0035)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from gpufleet.cli import output as out
from gpufleet.ops.install import setup as steps
from gpufleet.ops.install.files import Change, summary

INSTALL = "gpufleet install --prefix /opt/gpufleet"

app = typer.Typer(
    no_args_is_help=True,
    help="Write a host's config files and systemd units (/etc/gpufleet), idempotently.",
)

EtcOpt = Annotated[Path, typer.Option(help="where the config files and tokens go")]
SystemdOpt = Annotated[Path, typer.Option(help="where the systemd unit goes")]
BinOpt = Annotated[
    str,
    typer.Option(help="where gpufleet and its Slurm commands go on PATH ('': leave PATH alone)"),
]
ForceOpt = Annotated[
    bool, typer.Option("--force", help="replace config files that differ (yours are kept)")
]


def _on_path(bin_dir: str) -> list[Change]:
    if not bin_dir:
        return []
    from gpufleet.shims.onpath import put_on_path

    return put_on_path(Path(bin_dir), steps.gpufleet_executable(), os.environ.get("PATH", ""))


def _report(changes: list[Change], then: list[str]) -> None:
    print(summary(changes))
    if then:
        print("\nnext:")
        print("\n".join(f"  {line}" for line in then))


@app.command("controller")
def controller(
    host: Annotated[str, typer.Option(help="listen address")] = "0.0.0.0",
    port: Annotated[int, typer.Option(help="listen port")] = 8600,
    data_dir: Annotated[Path, typer.Option(help="the store, logs, admin.token")] = (
        steps.CONTROLLER_DATA
    ),
    user: Annotated[str, typer.Option(help="the account it runs as (made if missing)")] = (
        "gpufleet"
    ),
    etc: EtcOpt = steps.ETC,
    systemd_dir: SystemdOpt = steps.SYSTEMD,
    bin_dir: BinOpt = "/usr/local/bin",
    force: ForceOpt = False,
) -> None:
    """Set this host up as the controller: controller.yaml, gpufleet-controller.service."""
    try:
        made = steps.account(user, data_dir)
        changes = [made] if made else []
        changes += steps.controller(
            steps.Where(etc.absolute(), systemd_dir.absolute()),
            host=host,
            port=port,
            data_dir=data_dir.absolute(),
            user=user,
            gpufleet=steps.gpufleet_executable(),
            force=force,
        )
        url = f"http://{steps.default_name() if host in ('0.0.0.0', '::') else host}:{port}"
        changes.append(
            steps.client(steps.Where(etc.absolute(), systemd_dir.absolute()), url, force=force)
        )
        changes += _on_path(bin_dir)
    except (steps.SetupError, OSError) as e:
        out.fail(str(e), code=2)
    _report(
        changes,
        [
            "systemctl daemon-reload && systemctl enable --now gpufleet-controller",
            f"export GPUFLEET_SERVER={url} GPUFLEET_TOKEN_FILE={data_dir}/admin.token",
            "for each node: gpufleet token create NODE --role agent --node NODE --out NODE.token",
            "  copy NODE.token to the node, and there: gpufleet setup node "
            f"--controller {url} --name NODE --token-from NODE.token",
        ],
    )


@app.command("node")
def node(
    controller_url: Annotated[
        str, typer.Option("--controller", help="the controller's URL (URL,URL: HA)")
    ],
    name: Annotated[str, typer.Option(help="this node's name (default: the host's)")] = "",
    token_from: Annotated[
        Path | None,
        typer.Option(help="a token file made by `gpufleet token create`: copied, 0600"),
    ] = None,
    simulate: Annotated[str, typer.Option(help="simulated GPUs, e.g. 8xH100")] = "",
    leaf: Annotated[str, typer.Option(help="the node's leaf switch")] = "",
    data_dir: Annotated[Path, typer.Option(help="task logs and state")] = steps.AGENT_DATA,
    etc: EtcOpt = steps.ETC,
    systemd_dir: SystemdOpt = steps.SYSTEMD,
    bin_dir: BinOpt = "/usr/local/bin",
    force: ForceOpt = False,
) -> None:
    """Set this host up as a node: agent.yaml, agent.token, gpufleet-agent.service."""
    name = name or steps.default_name()
    try:
        changes = steps.node(
            steps.Where(etc.absolute(), systemd_dir.absolute()),
            controller_url=controller_url,
            name=name,
            data_dir=data_dir.absolute(),
            gpufleet=steps.gpufleet_executable(),
            token_from=token_from,
            simulate=simulate,
            leaf=leaf,
            force=force,
        )
        changes.append(
            steps.client(
                steps.Where(etc.absolute(), systemd_dir.absolute()), controller_url, force=force
            )
        )
        changes += _on_path(bin_dir)
    except (steps.SetupError, OSError) as e:
        out.fail(str(e), code=2)
    then = []
    for problem in steps.unreachable_install():
        out.warn(f"the agent would refuse to start: {problem}")
        then = [f"install gpufleet where every account can run it ({INSTALL}), run its setup"]
    if not (etc / "agent.token").exists():
        then += [
            f"on the controller: gpufleet token create {name} --role agent --node {name} "
            f"--out {name}.token",
            f"  copy it here and run this again with --token-from {name}.token",
        ]
    then += ["systemctl daemon-reload && systemctl enable --now gpufleet-agent"]
    then += [f"gpufleet nodes   # {name} is listed once its agent registered"]
    _report(changes, then)


@app.command("path")
def path(
    controller_url: Annotated[
        str,
        typer.Option(
            "--controller", help="the controller's URL, for every user of this host (client.yaml)"
        ),
    ] = "",
    bin_dir: BinOpt = "/usr/local/bin",
    etc: EtcOpt = steps.ETC,
    force: ForceOpt = False,
) -> None:
    """Put gpufleet and its Slurm commands (sbatch, srun, squeue, ...) on this host's PATH
    (a login host), unless a real Slurm is there; with --controller, tell them its URL."""
    try:
        changes = (
            [steps.client(steps.Where(etc.absolute()), controller_url, force=force)]
            if controller_url
            else []
        )
        changes += _on_path(bin_dir)
    except (steps.SetupError, OSError) as e:
        out.fail(str(e), code=2)
    _report(changes, [])
