"""Slurm's file name patterns (sbatch's --output, --error, --input): ``%j`` and the rest, as
slurmstepd expands them for a batch script.

``%%`` a percent sign; ``%A`` the array's job id (the job's own id outside an array); ``%a``
the array index (4294967294, Slurm's NO_VAL, outside an array); ``%j`` the job id; ``%J`` job
id and step (the job id alone for the batch script, as Slurm 22.05's); ``%s`` the step
(``batch``);
``%N`` the node's name; ``%n`` the node's number in the job and ``%t`` the task's (0 for the
batch script); ``%u`` the user; ``%x`` the job's name. A number between ``%`` and the letter
zero-pads a numeric value to that width (at most 10); a backslash anywhere turns expansion
off (the backslashes are removed). Any other ``%X`` is kept as it is (``%b``, the index modulo
10, is Slurm 23.02's: 22.05 keeps it, as here).

``shown``: the same pattern as ``scontrol show job`` prints it (StdOut, StdErr): Slurm 22.05
expands only an unpadded ``%A``, ``%a``, ``%j``, ``%u`` and ``%x`` there and keeps the rest
(``%N``, ``%5j``, ``%%``) as written, whatever the file is called."""

from __future__ import annotations

import re
from dataclasses import dataclass

NO_VAL = 4294967294  # what %a gives outside an array, as in Slurm
MAX_PAD = 10
_PATTERN = re.compile(r"%([0-9]*)([%AajJsNntux])")
_SHOWN = re.compile(r"%([Aajux])")


@dataclass(frozen=True, slots=True)
class FileFacts:
    job_id: str
    name: str
    user: str
    node: str
    array_id: str | None = None
    array_index: int | None = None
    step: str = "batch"
    task: int = 0
    node_index: int = 0


def expand(pattern: str, f: FileFacts) -> str:
    if "\\" in pattern:
        return pattern.replace("\\", "")
    index = f.array_index if f.array_index is not None else NO_VAL
    values = {
        "A": f.array_id if f.array_id is not None else f.job_id,
        "a": str(index),
        "j": f.job_id,
        "J": f.job_id if f.step == "batch" else f"{f.job_id}.{f.step}",
        "s": f.step,
        "N": f.node.split(".", 1)[0],
        "n": str(f.node_index),
        "t": str(f.task),
        "u": f.user,
        "x": f.name,
    }

    def one(m: re.Match[str]) -> str:
        width, key = m.group(1), m.group(2)
        if key == "%":
            return "%"
        value = values[key]
        if (
            width
            and key in "AajJnst"
            and (value.split(".", 1)[0].isascii() and value.split(".", 1)[0].isdigit())
        ):
            return value.zfill(min(int(width), MAX_PAD) + len(value) - len(value.split(".")[0]))
        return value

    return _PATTERN.sub(one, pattern)


def shown(pattern: str, f: FileFacts) -> str:
    """``pattern`` as scontrol prints it: its unpadded %A, %a, %j, %u and %x expanded, the rest
    as written (recorded from Slurm 22.05: tests/unit/test_sbatch_export.py)."""
    index = f.array_index if f.array_index is not None else NO_VAL
    values = {"A": f.array_id or f.job_id, "a": str(index), "j": f.job_id, "u": f.user,
              "x": f.name}  # fmt: skip
    return _SHOWN.sub(lambda m: values[m.group(1)], pattern)
