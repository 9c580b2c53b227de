"""`gpufleet spec check FILE…`: validate cluster or job specs; say what is wrong and where."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from gpufleet.io.specs import load_cluster, load_jobs, load_yaml
from gpufleet.model.errors import SpecError, each

app = typer.Typer(no_args_is_help=True)


@app.command("check")
def check(files: list[Path] = typer.Argument(..., help="cluster or job YAML files")) -> None:
    """Exit 0 when every file is valid; else print each error (file:line:column: field:
    problem), every one of each file at once, exit 1. Job files get the checks of submit -f."""
    console = Console(stderr=True)
    bad = 0
    for f in files:
        try:
            data = load_yaml(f)
            if isinstance(data, dict) and ("pools" in data or "nodes" in data):
                c = load_cluster(f)
                print(
                    f"{f}: cluster {c.name}: {len(c.nodes)} nodes, {c.total_gpus} GPUs, "
                    f"{len(c.leaves)} leaves, {len(c.queues)} queues"
                )
            else:  # as gpufleet submit -f reads it: the owner is the submitter's by default
                jobs = load_jobs(f, user="you")
                print(f"{f}: {len(jobs)} job spec{'s' if len(jobs) != 1 else ''}")
        except SpecError as e:  # every problem of the file, one line each
            for x in each(e):
                console.print(f"[red]error:[/] {x}", highlight=False, soft_wrap=True)
            bad += 1
    if bad:
        raise typer.Exit(1)
