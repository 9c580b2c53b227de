"""The ``gpufleet`` command's entry point: ``gpufleet jobs`` is answered by its fast path
(``cli/listing.py``) when it can be, every other command by the typer app (``cli/main.py``),
which imports typer, and through the client httpx and pydantic (issue 12)."""

from __future__ import annotations

import sys


def main() -> None:
    argv = sys.argv[1:]
    if argv[:1] == ["jobs"]:
        from gpufleet.cli.listing import fast

        if fast(argv[1:]):
            return
    from gpufleet.cli.main import app

    app()
