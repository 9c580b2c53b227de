"""What several job commands share: ``--json``, and squeue's ``-t`` and ``--me``."""

from __future__ import annotations

from typing import Annotated

import typer

from gpufleet.cli import output as out

JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]


def slurm_states(state: str | None) -> set[str] | None:
    """``-t`` as squeue and scancel take it (None: every state); a CLI error when unknown."""
    if state is None:
        return None
    from gpufleet.io import slurm_style  # squeue's codes, only when asked

    try:
        return slurm_style.states(state)
    except ValueError as e:
        out.fail(f"--state: {e}", code=2)


def me(user: str | None, mine: bool) -> str | None:
    """``--me``: this Unix user's jobs, as Slurm's commands mean it."""
    if not mine:
        return user
    import getpass

    return getpass.getuser()
