"""``gpufleet slurm-shims install|uninstall DIR``: Slurm's commands over gpufleet (opt-in)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from gpufleet.cli import output as out
from gpufleet.shims import install as shims

app = typer.Typer(no_args_is_help=True)
DirArg = Annotated[Path, typer.Argument(help="Directory to write them in, e.g. ~/.local/bin.")]


@app.command("install")
def install(
    directory: DirArg,
    force: Annotated[
        bool, typer.Option("--force", help="Overwrite files that are not gpufleet's shims.")
    ] = False,
) -> None:
    """Write sbatch, squeue, scancel, sinfo and sacct (and srun/scontrol when present) into
    DIR; they use this gpufleet's server, token and CA settings."""
    try:
        written = shims.install(directory.expanduser(), force=force)
    except ValueError as e:
        out.fail(str(e), "pass --force to replace them, or choose another directory", code=2)
    except OSError as e:
        out.fail(f"{directory}: {e}", code=2)
    print(f"wrote {', '.join(p.name for p in written)} into {directory}")
    on_path = str(directory.expanduser().resolve()) in (
        str(Path(p).expanduser().resolve())
        for p in os.environ.get("PATH", "").split(os.pathsep)
        if p
    )
    if not on_path:
        out.note(f"{directory} is not on PATH: export PATH={directory}:$PATH")


@app.command("uninstall")
def uninstall(directory: DirArg) -> None:
    """Remove the shims written into DIR (only those: other files stay)."""
    removed = shims.uninstall(directory.expanduser())
    print(f"removed {', '.join(p.name for p in removed) or 'nothing'} from {directory}")
