"""The ``gpufleet`` command's entry point: ``gpufleet jobs`` and ``gpufleet submit`` are
answered by their fast paths (``cli/listing.py``, ``cli/submit_fast.py``) when they can be,
every other command by the typer app (``cli/main.py``), which imports typer, and through the
client httpx and pydantic (issues 12 and 27)."""

from __future__ import annotations

import sys


def main() -> None:
    argv = sys.argv[1:]
    if argv[:1] == ["jobs"]:
        from gpufleet.cli.listing import fast

        if fast(argv[1:]):
            return
    elif argv[:1] == ["submit"]:
        from gpufleet.cli.submit_fast import fast as submit_fast

        if submit_fast(argv[1:]):
            return
    from gpufleet.cli.main import app

    app()
