"""``gpufleet controller --config FILE``: the click command that reads its options from a YAML
file (``base/optionfile.py``) before it parses the command line."""

from __future__ import annotations

from typing import Any

import typer
from typer import _click
from typer.core import TyperCommand

from gpufleet.base import optionfile


class ConfigCommand(TyperCommand):
    """A command whose ``--config FILE`` stands for the options written in FILE."""

    def parse_args(self, ctx: _click.Context, args: list[str]) -> list[str]:
        try:
            words = optionfile.expand(args, click_options(self))
        except optionfile.OptionFileError as e:
            # plain lines, not a box: each names its file and line, which a box would fold
            typer.echo(f"error: {e}", err=True)
            raise typer.Exit(2) from None
        return super().parse_args(ctx, words)


def click_options(command: Any) -> dict[str, optionfile.Kind]:
    """The long options of a click command, by kind (``--config`` and help left out)."""
    found: dict[str, optionfile.Kind] = {}
    for param in command.params:
        longs = [o[2:] for o in getattr(param, "opts", ()) if o.startswith("--")]
        if not longs or longs[0] == "config" or param.param_type_name != "option":
            continue
        kind: optionfile.Kind = "value"
        if getattr(param, "is_flag", False):
            kind = "switch" if getattr(param, "secondary_opts", None) else "flag"
        elif getattr(param, "multiple", False):
            kind = "multi"
        found[longs[0]] = kind
    return found
