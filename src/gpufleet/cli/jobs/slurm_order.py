"""``gpufleet submit``'s command line, read in two parts: gpufleet's own options (typer's,
``submit_options.py``) and sbatch's (``-N 3``, ``--gres=gpu:1``, ``-n``, ``-A``, …), which
typer does not know. Typer reads options only until the first one it does not know, so the
words are put in order first: gpufleet's options, then sbatch's, then the command. Typer then
leaves sbatch's options at the front of the command, where ``submit`` reads them with sbatch's
own reader (``io/sbatch/flags.py``): never run as the command."""

from __future__ import annotations

from typer import _click
from typer.core import TyperCommand, TyperOption

from gpufleet.io.slurm_opts import BY_SHORT, find_long


class SubmitCommand(TyperCommand):
    """``submit``: its words put in order before typer reads them."""

    def parse_args(self, ctx: _click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, in_order(args, self.own_options()))

    def own_options(self) -> dict[str, bool]:
        """gpufleet's options of this command: each name, and whether it takes a value."""
        out: dict[str, bool] = {}
        for p in self.params:
            if isinstance(p, TyperOption):
                for name in (*p.opts, *p.secondary_opts):
                    out[name] = not p.is_flag
        return out


def in_order(args: list[str], own: dict[str, bool]) -> list[str]:
    """``args`` with gpufleet's options first, then sbatch's (and words neither knows, which
    sbatch's reader refuses), then the command from ``--`` or its first word, as given."""
    ours: list[str] = []
    theirs: list[str] = []
    i = 0
    while i < len(args):
        word = args[i]
        if word == "--" or not word.startswith("-") or word == "-":
            break
        n = _words(word, own, has_next=i + 1 < len(args))
        (ours if _own(word, own) else theirs).extend(args[i : i + n])
        i += n
    return ours + theirs + args[i:]


def _own(word: str, own: dict[str, bool]) -> bool:
    return (word.partition("=")[0] if word.startswith("--") else word[:2]) in own


def _words(word: str, own: dict[str, bool], *, has_next: bool) -> int:
    """How many words the option ``word`` takes (itself, and its value when that is apart)."""
    if word.startswith("--"):
        name, eq, _ = word.partition("=")
        if eq:
            return 1
        if name in own:
            takes = own[name]
        else:
            opt, _ = find_long(name[2:])
            takes = opt is not None and opt.arg == "required"
        return 2 if takes and has_next else 1
    short = word[:2]
    if short in own:
        return 2 if own[short] and len(word) == 2 and has_next else 1
    for j, letter in enumerate(word[1:], start=1):  # sbatch's letters bundle: -HN2, -N 2
        opt = BY_SHORT.get(letter)
        if opt is not None and opt.arg != "none":
            return 2 if opt.arg == "required" and j == len(word) - 1 and has_next else 1
    return 1
