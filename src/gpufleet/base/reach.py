"""Whether other accounts can reach a path: every directory on the way passable (o+x), the
path itself readable (o+r) and, for a program or a directory, o+x too. A root agent runs each
task's helpers with its own interpreter as the task's owner (ADR 0019), so what it runs must
be reachable by any account; it looks once, at start (ADR 0035)."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Closed:
    """``path`` (mode ``mode``) keeps others from ``target``; ``fix`` opens it."""

    path: Path
    mode: int
    target: Path
    fix: str

    def line(self) -> str:
        return f"{self.path} ({self.mode:04o}) is closed to others, on the way to {self.target}"


def _mode(p: Path) -> int | None:
    try:
        return p.stat().st_mode
    except OSError:
        return None


def on_the_way(target: Path) -> Closed | None:
    """The first directory above ``target`` that others may not pass through: above it as
    named, then above what it links to (the kernel walks both)."""
    given, real = Path(os.path.abspath(target)), target.resolve()
    for path in dict.fromkeys([given, real]):  # a link's own directories, then its target's
        for d in reversed(path.parents):
            mode = _mode(d)
            if mode is not None and not mode & stat.S_IXOTH:
                return Closed(d, stat.S_IMODE(mode), path, f"chmod o+x {d}")
    return None


def itself(target: Path, *, run: bool) -> Closed | None:
    """``target`` not readable by others (a program or a directory: not runnable either)."""
    mode = _mode(target)
    if mode is None:
        return None
    need = stat.S_IROTH | (stat.S_IXOTH if run or stat.S_ISDIR(mode) else 0)
    if mode & need == need:
        return None
    fix = f"chmod o+rx {target}" if need & stat.S_IXOTH else f"chmod o+r {target}"
    return Closed(target, stat.S_IMODE(mode), target, fix)


def in_tree(root: Path) -> Closed | None:
    """The first file under ``root`` others cannot read, or directory they cannot enter
    (a pip install under umask 077 makes them all so)."""
    for here, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in [*dirs, *files]:
            p = Path(here) / name
            mode = _mode(p)
            if mode is None or stat.S_ISLNK(mode):
                continue
            need = stat.S_IROTH | (stat.S_IXOTH if stat.S_ISDIR(mode) else 0)
            if mode & need != need:
                return Closed(p, stat.S_IMODE(mode), root, f"chmod -R o+rX {root}")
    return None


def closed(target: Path, *, run: bool = False, tree: bool = False) -> Closed | None:
    """What keeps others from ``target`` first, if anything."""
    found = on_the_way(target) or itself(target, run=run)
    if found is None and tree and target.is_dir():
        found = in_tree(target)
    return found
