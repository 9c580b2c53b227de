"""Blocks of ports that local clusters on one host hand out, claimed across processes: a file
per block in a shared directory, holding the claimer's pid (a block whose claimer is gone is
free again). Parallel test workers are processes: a set in one of them cannot keep two
workers' clusters off the same block; the files can."""

from __future__ import annotations

import os
import secrets
import tempfile
from collections.abc import Callable
from pathlib import Path

CLAIMS = Path(tempfile.gettempdir()) / "gpufleet-port-blocks"


def claim_block(pool: range, size: int, usable: Callable[[int], bool] | None = None) -> range:
    """A block of ``size`` ports of ``pool`` (aligned on ``size``: every claimer of one pool
    uses one size, or blocks could overlap under different names) that no live process has
    claimed and whose ports ``usable(port)`` accepts, claimed for this process until
    ``release``; the search starts at a random block. RuntimeError when none is left."""
    blocks = [range(p, p + size) for p in range(pool.start, pool.stop - size + 1, size)]
    if not blocks:
        raise ValueError(f"no block of {size} ports in {pool.start}-{pool.stop - 1}")
    CLAIMS.mkdir(mode=0o1777, exist_ok=True)
    start = secrets.randbelow(len(blocks))
    for block in blocks[start:] + blocks[:start]:
        if not _claim(block.start):
            continue
        if usable is None or all(usable(p) for p in block):
            return block
        release(block)  # claimed, but something holds one of its ports now
    raise RuntimeError(f"no free block of {size} ports in {pool.start}-{pool.stop - 1}")


def release(block: range, mine_only: bool = True) -> None:
    """The block's claim removed (only this process's, unless ``mine_only`` is False)."""
    path = CLAIMS / str(block.start)
    if mine_only and _holder(path) != os.getpid():
        return
    path.unlink(missing_ok=True)


def _claim(first: int) -> bool:
    path = CLAIMS / str(first)
    for _ in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            holder = _holder(path)
            if holder is None or _alive(holder):
                return False
            path.unlink(missing_ok=True)  # its claimer is gone: the block is free again
            continue
        with os.fdopen(fd, "w") as f:
            f.write(str(os.getpid()))
        return True
    return False


def _holder(path: Path) -> int | None:
    try:
        return int(path.read_text() or "0") or None
    except (OSError, ValueError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
