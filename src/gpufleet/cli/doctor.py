"""``gpufleet doctor [node NODE | job JOB]``: what is wrong, why, and what to do next."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.text import Text

from gpufleet.cli import output as out
from gpufleet.cli.config import ServerOpt, TokenOpt, connect
from gpufleet.ops.doctor import cluster as cluster_doctor
from gpufleet.ops.doctor import job as job_doctor
from gpufleet.ops.doctor import node as node_doctor
from gpufleet.ops.doctor.finding import Finding, Severity, worst
from gpufleet.ops.validate import Settings

JsonOpt = Annotated[bool, typer.Option("--json", help="One JSON document on stdout.")]
STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan", "ok": "green"}

app = typer.Typer(
    invoke_without_command=True,
    help="Diagnose the cluster, a node or a job: what was checked, what was seen, the likely "
    "cause, the next step. Exits 1 when it finds an error.",
)


@app.callback()
def overview(
    ctx: typer.Context, json_out: JsonOpt = False, server: ServerOpt = None, token: TokenOpt = None
) -> None:
    """Without a subcommand: every node's state and the last failed jobs (no probe jobs)."""
    if ctx.invoked_subcommand is not None:
        return
    with connect(server, token) as c:
        findings = cluster_doctor.diagnose(c)
    finish(findings, json_out)


@app.command("node")
def node(
    name: Annotated[str, typer.Argument(help="The node's name (gpufleet nodes).")],
    local: Annotated[
        bool, typer.Option("--local", help="Run the probe here, on the node itself, not as a job.")
    ] = False,
    python: Annotated[str, typer.Option("--python", help="The Python on the nodes.")] = "python3",
    probe_controller: Annotated[
        str, typer.Option("--probe-controller", help="The controller's URL as the nodes reach it.")
    ] = "",
    queue: Annotated[
        str, typer.Option("--queue", "-p", help="Queue for the probe jobs (sbatch's partition).")
    ] = Settings().queue,
    json_out: JsonOpt = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """GPU not recognized (driver module, device nodes, permissions, NVML), slow communication
    (bandwidth, latency, MTU, route), storage bottleneck, clock out of sync."""
    settings = Settings(python=python, probe_controller=probe_controller, queue=queue)
    with connect(server, token) as c:
        findings = node_doctor.diagnose(c, name, settings, local=local, log=out.note)
    finish(findings, json_out)


@app.command("job")
def job(
    job_id: Annotated[str, typer.Argument(help="The job's id.")],
    json_out: JsonOpt = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Why a job failed or waits: its state and events, and its logs matched against known
    failures (CUDA out of memory, NCCL errors, missing modules, the OOM killer, the time limit,
    a lost node, ...), each with what to change."""
    with connect(server, token) as c:
        findings = job_doctor.diagnose(c, job_id)
    finish(findings, json_out)


def finish(findings: list[Finding], json_out: bool) -> None:
    if json_out:
        out.emit_json(
            {"severity": worst(findings).value, "findings": [f.to_dict() for f in findings]}
        )
    else:
        show(findings)
    if worst(findings) is Severity.ERROR:
        raise typer.Exit(1)


def show(findings: list[Finding]) -> None:
    out.table(
        ["", "TARGET", "CHECKED", "SEEN", "LIKELY CAUSE", "NEXT STEP"],
        [
            [
                Text(f.severity.value.upper(), style=STYLE[f.severity.value]),
                f.target,
                f.check,
                f.seen,
                f.cause,
                f.next_step,
            ]
            for f in findings
        ],
        empty="nothing to report",
    )
