"""The shims' command lines: argparse (``io/slurm_argv.py``) with ``--help``, failing as Slurm's
commands do (``prog: error: …``, exit 1)."""

from __future__ import annotations

from gpufleet.io.slurm_argv import ArgvParser
from gpufleet.shims.common import die

TYPE_CHECKING = False  # no typing at run time (issue 27)
if TYPE_CHECKING:
    from typing import NoReturn


class Parser(ArgvParser):
    def __init__(self, prog: str, description: str) -> None:
        super().__init__(prog, description)
        self.add_argument("--help", "--usage", action="help", help="show this help")

    def error(self, message: str) -> NoReturn:
        die(self.prog, f"{message} (see {self.prog} --help)")
