"""`gpufleet spec check FILE`: validate a cluster or job spec and say what is wrong and where."""

from __future__ import annotations

from pathlib import Path

import typer

app = typer.Typer(no_args_is_help=True)
