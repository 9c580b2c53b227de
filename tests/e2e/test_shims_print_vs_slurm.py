"""What the Slurm shims print, against what a real Slurm 22.05 printed for the same jobs
(``shimdiff.py``: the jobs, the commands, what is normalized and why). The record
(``slurm_printed/*.txt``) was made by ``test_slurm_prints_what_is_recorded`` with
``SHIMDIFF_RECORD=DIR`` (``shared/tools/slurm_local.sh``, one node of 8 CPUs and 4 GPUs,
partitions ``gpu`` and ``debug``); that test compares a live Slurm with it where Slurm is
installed, and the first one runs without Slurm.

What gpufleet cannot print the same, and why, is KNOWN: each the Slurm line and gpufleet's, so
that the test still fails if either changes."""

from __future__ import annotations

import getpass
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from livehelp import user_shims
from shimdiff import (
    COMMANDS,
    SACCT,
    Site,
    capture,
    normalize,
    read_record,
    settle,
    submit,
    write_record,
)

from support.slurm_local import SlurmPool, live

pytestmark = pytest.mark.e2e
RECORD = read_record()

USER = "alice"  # gpufleet's user: no Unix account (gpufleet never runs a job as root)
QUEUES = "queues:\n  - {name: default, weight: 1}\n  - {name: debug, weight: 1}\n"
ESTIMATE = (
    "a pending job's expected start: gpufleet's plan has none while the jobs before it run"
    " without a time limit; Slurm's backfill prints one all the same (and --start's order is by"
    " it: gpufleet's then the order of squeue's other lines)"
)
TRES = (
    "TRES: Slurm counts gres/gpu where AccountingStorageTRES names it, which slurm_local.sh's"
    " does not; gpufleet always does: the job's GPUs, those of its TresPerNode"
)
_START = "{:>18}      PART {:>8}     USER PD " + "N/A".rjust(19) + "      1 (null)" + " " * 14
_START += " ({})\n"
# (command or "*", Slurm's text, gpufleet's, how many (0: all), why): made in this order
KNOWN: list[tuple[str, str, str, int, str]] = [
    ("squeue --start", "PD DATE" + " " * 21, "PD " + " " * 16 + "N/A" + " " * 6, 0, ESTIMATE),
    (
        "squeue --start",
        _START.format("P", "prio", "Priority") + _START.format("A_[2-5]", "arr", "Resources"),
        _START.format("A_[2-5]", "arr", "Resources") + _START.format("P", "prio", "Priority"),
        1,
        ESTIMATE,
    ),
    *(
        (
            f"scontrol show job {j}",
            "StartTime=DATE EndTime=Unknown",
            "StartTime=Unknown EndTime=Unknown",
            1,
            ESTIMATE,
        )
        for j in ("{P}", "{A}_2", "{A}")
    ),
    ("scontrol -o show job {P}", "StartTime=DATE", "StartTime=Unknown", 1, ESTIMATE),
    *(
        (
            cmd,
            "       USER          1",
            "       PART          1",
            0,
            "sacct's Account: Slurm's accounting account (root's default here); gpufleet's queue",
        )
        for cmd in ("sacct -j {F}",)
    ),
    (
        "sinfo -N -h -o '%N %t %G'",
        " gpu:4",
        " gpu:h100:4",
        0,
        "GRES: slurm_local.sh's node has no GPU type (Gres=gpu:4); a gpufleet node always has its"
        " model (Slurm's node of Gres=gpu:h100:4 prints the same)",
    ),
    (
        "squeue -O JobID,State,Reason,NumNodes",
        "#  ",
        "A  ",
        0,
        "a running array task's own id: Slurm gives task 1 one when it starts (#), gpufleet's task"
        " 1 has the array's from its submission",
    ),
]


def _gpus_in_tres(text: str) -> str:
    """Each job's ``TRES=…`` with its GPUs (TRES, above)."""

    def one(record: str) -> str:
        gpus = re.search(r"TresPerNode=gres:gpu:(\d+)", record)
        if gpus is None:
            return record
        return re.sub(r"(TRES=\S*billing=\d+)", rf"\1,gres/gpu={gpus.group(1)}", record)

    return "\n\n".join(one(r) for r in text.split("\n\n"))


def expected(cmd: str, used: set[int] | None = None) -> str:
    """Slurm's record of ``cmd``, with KNOWN's differences made (``used``: the KNOWN entries
    that changed it)."""
    text = RECORD[cmd]
    for k, (where, theirs, ours, count, _) in enumerate(KNOWN):
        if where in ("*", cmd) and theirs in text:
            text = text.replace(theirs, ours, count or -1)
            if used is not None:
                used.add(k)
    return _gpus_in_tres(text)


def test_each_known_difference_is_one_slurm_printed() -> None:
    """No KNOWN entry stands for nothing: each changes some command's record."""
    used: set[int] = set()
    for cmd in COMMANDS + SACCT:
        expected(cmd, used)
    assert [KNOWN[k][1] for k in range(len(KNOWN)) if k not in used] == []


@pytest.fixture(scope="module")
def gpufleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    with user_shims(tmp_path_factory.mktemp("shimdiff"), 1, USER, QUEUES) as env:
        yield env


def printed(env: dict[str, str], slurm: bool, user: str) -> dict[str, str]:
    """The jobs submitted, waited for, and COMMANDS' output normalized."""

    def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, env=env, cwd=env["PWD"], capture_output=True, text=True,
                              timeout=60)  # fmt: skip

    ids = submit(run, Path(env["PWD"]))
    settle(run, ids, estimates=slurm)
    site = Site(user, "n1" if slurm else "node-0", "gpu" if slurm else "default", env["PWD"])
    got = {cmd: normalize(text, ids, site) for cmd, text in capture(run, ids, user).items()}
    if not slurm:  # (slurm_local.sh's Slurm keeps no accounting: sacct.txt's docstring)
        sacct = capture(run, ids, user, SACCT)
        got |= {cmd: normalize(text, ids, site, sacct=True) for cmd, text in sacct.items()}
    return got


def test_gpufleet_prints_what_slurm_printed(gpufleet: dict[str, str]) -> None:
    got = printed(gpufleet, False, USER)
    assert list(got) == COMMANDS + SACCT
    differ = [cmd for cmd in got if got[cmd] != expected(cmd)]
    for cmd in differ:
        print(f"--- {cmd}\nSlurm:\n{expected(cmd)}\ngpufleet:\n{got[cmd]}")
    assert not differ


@live
def test_slurm_prints_what_is_recorded(
    slurms: SlurmPool, tmp_path_factory: pytest.TempPathFactory
) -> None:
    with slurms.own(nodes=1) as env:  # a new one: the record lists every job (-t all)
        work = tmp_path_factory.mktemp("work")
        got = printed({**env, "PWD": str(work)}, True, getpass.getuser())
    record = os.environ.get("SHIMDIFF_RECORD")
    if record:
        write_record(got, Path(record))
    differ = [cmd for cmd in COMMANDS if got[cmd] != RECORD[cmd]]
    for cmd in differ:
        print(f"--- {cmd}\nrecorded:\n{RECORD[cmd]}\nnow:\n{got[cmd]}")
    assert not differ
