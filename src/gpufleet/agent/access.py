"""At start, as root: can the accounts that jobs run as run what this agent runs as them? The
interpreter (the keeper, taskstart, the step daemon and srun all run with it), its venv, the
standard library, gpufleet and its packages, the ``slurm-bin`` of the data directory. One look
at start, refusing with the command that fixes it, instead of every job failing (ADR 0035)."""

from __future__ import annotations

import os
import sys
import sysconfig
from pathlib import Path

from gpufleet.base.reach import Closed, closed

INSTALL = "gpufleet install --prefix /opt/gpufleet"


def _what(data_dir: Path) -> list[tuple[str, Path, bool, bool]]:
    """(what, path, run, tree) for everything a task's account runs."""
    import gpufleet

    paths = sysconfig.get_paths()
    found = [
        ("this agent's Python", Path(sys.executable), True, False),
        ("this agent's Python", Path(sys.executable).resolve(), True, False),
        ("the standard library", Path(paths["stdlib"]), False, False),
        ("gpufleet", Path(gpufleet.__file__).parent, False, True),
        ("the installed packages", Path(paths["purelib"]), False, False),
        ("the installed packages", Path(paths["platlib"]), False, False),
        ("the data directory (slurm-bin: srun, scontrol)", data_dir, False, False),
    ]
    cfg = Path(sys.prefix) / "pyvenv.cfg"
    if cfg.exists():  # unread, the interpreter is no venv's and finds no packages
        found.insert(1, ("the venv's pyvenv.cfg", cfg, False, False))
    return found


def problems(data_dir: Path) -> list[tuple[str, Closed]]:
    """Each thing job accounts cannot reach, with the first obstacle (one per obstacle)."""
    seen: set[Path] = set()
    out: list[tuple[str, Closed]] = []
    for what, path, run, tree in _what(data_dir):
        if what.startswith("the data directory"):
            found = closed(path / "slurm-bin", run=False) if path.exists() else None
            found = found if found is None or found.path != path else None  # made 0711 at start
        else:
            found = closed(path, run=run, tree=tree)
        if found is not None and found.path not in seen:
            seen.add(found.path)
            out.append((what, found))
    return out


def check(data_dir: Path) -> None:
    """ValueError with every obstacle and its fix, when the agent runs as root (its tasks then
    run as other accounts) and they cannot reach what it runs."""
    if os.geteuid() != 0:
        return  # tasks run as this agent's own account
    found = problems(data_dir)
    if not found:
        return
    lines = [f"  {what}: {c.line()}; fix: {c.fix}" for what, c in found]
    raise ValueError(
        "the accounts jobs run as cannot run this agent's helpers (tasks start with its Python, "
        "as their owner):\n" + "\n".join(lines) + "\n"
        f"or install gpufleet where every account can run it ({INSTALL}) and start that agent; "
        "on a node whose jobs all run as this agent's own account, --no-access-check"
    )
