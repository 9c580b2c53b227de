"""The ``srun`` and ``scontrol`` a batch job's tasks find on their PATH: two small scripts
that run this agent's Python on ``gpufleet.slurm``, written at start into ``DATA_DIR/slurm-bin``
(the agent's, 0755: users run them and cannot change them). The data directory is then
0711: others may pass through it to that directory, never list it (each job's directory in
it stays 0700)."""

from __future__ import annotations

import logging
import os
import shlex
import stat
import sys
import tempfile
from pathlib import Path

COMMANDS = {"srun": "gpufleet.slurm.srun", "scontrol": "gpufleet.slurm.scontrol"}
BIN = "slurm-bin"
log = logging.getLogger(__name__)


def install(data_dir: Path, python: str = sys.executable) -> Path:
    d = data_dir / BIN
    d.mkdir(exist_ok=True)
    if d.is_symlink() or not d.is_dir():
        raise NotADirectoryError(f"{d} is not a directory")
    os.chmod(d, 0o755)
    for name, module in COMMANDS.items():
        # -P: the task's working directory is not put on sys.path (no module there shadows ours)
        text = f'#!/bin/sh\nexec {shlex.quote(python)} -P -m {module} "$@"\n'
        fd, tmp = tempfile.mkstemp(dir=d, prefix=f".{name}.")
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, 0o755)
        os.replace(tmp, d / name)
    os.chmod(data_dir, 0o711)
    closed = unreachable(d)
    if closed is not None and os.geteuid() == 0:  # tasks run as other accounts
        log.warning(
            "%s is not passable by others (o+x): jobs' accounts cannot run the srun and "
            "scontrol in %s",
            closed,
            d,
        )
    return d


def unreachable(path: Path) -> Path | None:
    """The first directory above ``path`` that others may not pass through, if any."""
    for p in reversed(path.resolve().parents):
        try:
            if not p.stat().st_mode & stat.S_IXOTH:
                return p
        except OSError:
            return p
    return None
