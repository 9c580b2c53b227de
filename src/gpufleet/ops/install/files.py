"""Files written so that a second run changes nothing and says so: each write reports whether
it wrote, updated, left unchanged, or kept a file the administrator made their own."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Outcome = Literal["wrote", "updated", "unchanged", "kept"]


@dataclass(frozen=True)
class Change:
    path: Path
    outcome: Outcome
    why: str = ""

    def line(self) -> str:
        return f"{self.outcome:9} {self.path}" + (f" ({self.why})" if self.why else "")


def put(path: Path, text: str, mode: int, *, ours: bool) -> Change:
    """Write ``text`` to ``path`` with ``mode`` (atomically: a reader sees the old file or the
    new). A file that exists with other text is replaced when it is ``ours`` (a unit: setup
    owns it), else kept (a config file: the administrator may have edited it)."""
    try:
        old: str | None = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        old = None
    if old == text:
        if (path.stat().st_mode & 0o7777) != mode:
            path.chmod(mode)
            return Change(path, "updated", f"mode {mode:04o}")
        return Change(path, "unchanged")
    if old is not None and not ours:
        return Change(path, "kept", "yours: it differs from what setup writes; --force replaces it")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            os.fchmod(f.fileno(), mode)
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return Change(path, "wrote" if old is None else "updated")


def summary(changes: list[Change]) -> str:
    """One line per file, and a last one that says whether anything changed."""
    lines = [c.line() for c in changes]
    if all(c.outcome in ("unchanged", "kept") for c in changes):
        lines.append("nothing changed: this host was set up already")
    return "\n".join(lines)
