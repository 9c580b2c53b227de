"""argparse for the command lines of Slurm's commands, read where they are typed (the shims)
or by the controller (``POST /squeue``): a refusal raises ``ArgvError`` with argparse's message,
and nothing exits the process. The shims' ``Parser`` adds ``--help`` and Slurm's way of failing."""

from __future__ import annotations

import argparse

TYPE_CHECKING = False  # no typing at run time (issue 27)
if TYPE_CHECKING:
    from typing import Any, NoReturn


class ArgvError(Exception):
    """A command line its command refuses: argparse's message."""


class ArgvParser(argparse.ArgumentParser):
    """argparse without ``-h`` (squeue's and sinfo's ``--noheader``) or help, raising
    ``ArgvError`` for a bad command line."""

    def __init__(self, prog: str, description: str) -> None:
        super().__init__(prog=prog, description=description, add_help=False)

    def add_argument(self, *args: Any, **kwargs: Any) -> Any:
        self._checking = True
        try:
            return super().add_argument(*args, **kwargs)
        finally:
            self._checking = False

    def _get_formatter(self) -> argparse.HelpFormatter:
        # argparse checks each argument's help with a formatter, whose width is the terminal's:
        # it imports shutil for it (and through it zlib, bz2, lzma), a few ms of a command that
        # prints no help (issue 27). A check of the arguments needs no terminal.
        if getattr(self, "_checking", False):
            return argparse.HelpFormatter(prog=self.prog, width=80)
        return super()._get_formatter()

    def error(self, message: str) -> NoReturn:
        raise ArgvError(f"{message} (see {self.prog} --help)")
