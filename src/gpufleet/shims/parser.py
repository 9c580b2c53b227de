"""The shims' command lines: argparse, failing as Slurm's commands do."""

from __future__ import annotations

import argparse

from gpufleet.shims.common import die

TYPE_CHECKING = False  # no typing at run time (issue 27)
if TYPE_CHECKING:
    from typing import Any, NoReturn


class Parser(argparse.ArgumentParser):
    """argparse that fails as Slurm's commands do (``prog: error: …``, exit 1), with ``-h``
    free for the commands that use it as ``--noheader``."""

    def __init__(self, prog: str, description: str) -> None:
        super().__init__(prog=prog, description=description, add_help=False)
        self.add_argument("--help", "--usage", action="help", help="show this help")

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
        die(self.prog, f"{message} (see {self.prog} --help)")
