"""Job logs as the agents ship them: one file per (job, attempt, rank, stream)."""

from __future__ import annotations

import os
import re
from pathlib import Path

_SAFE = re.compile(r"^[A-Za-z0-9_.-]+$")


class LogStore:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.complete: set[tuple[str, int, int, str]] = set()

    def _path(self, job: str, attempt: int, rank: int, stream: str) -> Path:
        if not _SAFE.match(job):
            raise ValueError(f"bad job id {job!r}")
        return self.root / job / str(attempt) / f"rank{rank}.{stream}"

    def append(
        self, job: str, attempt: int, rank: int, stream: str, offset: int, data: str, final: bool
    ) -> None:
        p = self._path(job, attempt, rank, stream)
        p.parent.mkdir(mode=0o700, parents=True, exist_ok=True)  # a job's output is its owner's
        raw = data.encode()
        size = p.stat().st_size if p.exists() else 0
        if offset > size:
            raise ValueError(f"log chunk at offset {offset} leaves a gap after {size}")
        with os.fdopen(os.open(p, os.O_RDWR | os.O_CREAT, 0o600), "r+b") as f:
            f.seek(offset)  # a retried chunk overwrites itself: at-least-once shipping is safe
            f.write(raw)
        if final:
            self.complete.add((job, attempt, rank, stream))

    def read(
        self, job: str, attempt: int, rank: int, stream: str, offset: int, limit: int = 1 << 20
    ) -> tuple[str, int, bool]:
        p = self._path(job, attempt, rank, stream)
        # past the end there is nothing to read (a seek far past it is EINVAL on some file
        # systems: an offset near 2**63 from a client was a 500)
        if not p.exists() or offset >= p.stat().st_size:
            return "", offset, (job, attempt, rank, stream) in self.complete
        with p.open("rb") as f:
            f.seek(offset)
            raw = f.read(limit)
        return (
            raw.decode(errors="replace"),
            offset + len(raw),
            (job, attempt, rank, stream) in self.complete,
        )
