"""``gpufleet install``: gpufleet in a venv every account can run (``/opt/gpufleet``), then
gpufleet and its Slurm commands on PATH (ADR 0035)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Annotated

import typer

from gpufleet.cli import output as out
from gpufleet.ops.install import venv


def install(
    prefix: Annotated[Path, typer.Option(help="the venv to make (or install over)")] = Path(
        "/opt/gpufleet"
    ),
    source: Annotated[
        str,
        typer.Option(
            "--from", help="a gpufleet checkout or wheel (default: the checkout this runs from)"
        ),
    ] = "",
    extras: Annotated[
        str, typer.Option(help="extras: server on the controller's host, postgres, ...")
    ] = "",
    python: Annotated[
        str, typer.Option(help="the interpreter to base it on (default: one all can run)")
    ] = "",
    bin_dir: Annotated[
        str,
        typer.Option(help="where gpufleet and its Slurm commands go on PATH ('': nowhere)"),
    ] = "/usr/local/bin",
) -> None:
    """Install gpufleet into a venv that every account can run (a root agent runs each task's
    helpers with it as the task's owner), and put it and its Slurm commands on PATH."""
    where = source or str(venv.checkout() or "")
    if not where:
        out.fail(
            "this gpufleet is not a checkout: give --from DIR_OR_WHEEL", code=2
        )  # pragma: no cover - an installed gpufleet
    prefix = prefix.absolute()
    try:
        exe = venv.make(prefix, where, venv.base_python(python or None), extras)
    except venv.InstallError as e:
        out.fail(str(e), code=2)
    print(f"installed {exe}")
    if bin_dir:
        done = subprocess.run([str(exe), "setup", "path", "--bin-dir", bin_dir])
        if done.returncode != 0:
            raise typer.Exit(done.returncode)
    print("\nnext, with this gpufleet:")
    print(f"  on the controller's host: {exe} setup controller   (installed with --extras server)")
    print(f"  on each node: {exe} setup node --controller URL --token-from NODE.token")
