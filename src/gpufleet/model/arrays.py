"""Slurm's ``--array`` grammar, read once for the API, ``#SBATCH`` scripts and the CLI.

``0-9``, ``1,3,5``, ``0-15:4`` (a step), each optionally with ``%N`` (at most N tasks at once).
The number of tasks is worked out from the range text before anything is expanded, so
``0-1000000000`` is refused without a billion-element list (Slurm's MaxArraySize, default 1001).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpufleet.model.errors import SpecError

MAX_ARRAY_SIZE = 1001  # Slurm's default MaxArraySize: tasks per array
MAX_INDEX = 2**31 - 1  # task ids travel in env vars and int columns
_ITEM = re.compile(r"\s*([0-9]{1,10})(?:-([0-9]{1,10})(?::([0-9]{1,10}))?)?\s*")
_MAX_TEXT = 4096  # a longer range text is refused before it is split


@dataclass(frozen=True, slots=True)
class ArraySpec:
    indexes: tuple[int, ...]  # sorted, distinct
    limit: int | None  # %N: at most N tasks run at once (None: no limit)


def parse_array(
    text: str, *, max_size: int = MAX_ARRAY_SIZE, source: str = "", field: str = "array"
) -> ArraySpec:
    """The indexes of an array, or a SpecError naming ``field``; never builds more than
    ``max_size`` indexes."""

    def err(message: str) -> SpecError:
        return SpecError(message, source=source, field=field)

    if not isinstance(text, str) or not text.strip():
        raise err("expected indexes such as 0-9, 1,3,5, 0-15%4 or 0-15:2")
    if len(text) > _MAX_TEXT:
        raise err(f"longer than {_MAX_TEXT} characters")
    limit: int | None = None
    body = text
    if "%" in text:
        body, _, n = text.rpartition("%")
        if not re.fullmatch(r"\s*[0-9]{1,10}\s*", n) or int(n) < 1:
            raise err(f"'%{n}': the task limit must be a whole number >= 1")
        limit = int(n)
    ranges: list[range] = []
    count = 0
    for part in body.split(","):
        m = _ITEM.fullmatch(part)
        if not m:
            raise err(f"cannot read {part!r} (use 0-9, 1,3,5, 0-15%4 or 0-15:2)")
        lo = int(m[1])
        hi = int(m[2]) if m[2] else lo
        step = int(m[3]) if m[3] else 1
        if hi < lo or step < 1:
            raise err(f"{part.strip()!r} is an empty range")
        if hi > MAX_INDEX:
            raise err(f"index {hi} is above {MAX_INDEX}")
        r = range(lo, hi + 1, step)
        count += len(r)  # len of a range costs nothing: the size is known before expanding
        if count > max_size:
            raise err(f"more than {max_size} tasks (the array size limit, MaxArraySize)")
        ranges.append(r)
    return ArraySpec(tuple(sorted({i for r in ranges for i in r})), limit)


def array_name(name: str, index: int | None) -> str:
    """The name of task ``index``'s array, as Slurm has it on every task: gpufleet names each
    task ``NAME_INDEX`` (server/submitting.py); None: not an array's task, its own name."""
    return name.removesuffix(f"_{index}") if index is not None else name
