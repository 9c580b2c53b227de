"""``gpufleet gateway``: the services' proxy as a process of its own (ops/gatewayd.py)."""

from __future__ import annotations

import typer


def gateway(ctx: typer.Context) -> None:
    """Run the services' proxy that follows the leading controller (--gateway remote):
    --controller URL,URL --token-file F [--kind haproxy|nginx|builtin] [--host H].

    Every option is the gateway's own (see ``gpufleet gateway --help-gateway``)."""
    from gpufleet.ops.gatewayd import main

    args = list(ctx.args)
    if "--help-gateway" in args:
        args = ["--help"]
    raise typer.Exit(main(args))
