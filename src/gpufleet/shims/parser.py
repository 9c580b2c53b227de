"""The shims' command lines: argparse, failing as Slurm's commands do."""

from __future__ import annotations

import argparse
from typing import NoReturn

from gpufleet.shims.common import die


class Parser(argparse.ArgumentParser):
    """argparse that fails as Slurm's commands do (``prog: error: …``, exit 1), with ``-h``
    free for the commands that use it as ``--noheader``."""

    def __init__(self, prog: str, description: str) -> None:
        super().__init__(prog=prog, description=description, add_help=False)
        self.add_argument("--help", "--usage", action="help", help="show this help")

    def error(self, message: str) -> NoReturn:
        die(self.prog, f"{message} (see {self.prog} --help)")
