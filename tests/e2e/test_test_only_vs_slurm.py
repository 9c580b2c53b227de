"""``sbatch --test-only`` against what a real Slurm 22.05 printed for the same command lines
(slurm_local.sh with SLURM_LOCAL_NODES=2; gpufleet: two agents of 4 GPUs), idle first: the line
``sbatch: Job N to start at TIME using N processors on nodes LIST in partition P`` on stderr,
nothing on stdout, exit 0; a request no node could hold refused with exit 1; and no job stored
either way (squeue lists none); then, two jobs running, when a job that fits only once one of
them ends would start (in minutes from when it was asked). Normalized: the job id (``#``), the
time (``DATE``), the node list (its number of nodes: which node an idle cluster offers is each
one's choice) and Slurm's default partition ``gpu`` as gpufleet's ``default``. Slurm's words
for a refusal (``allocation failure: …``) are not compared: gpufleet's say each problem, as its
sbatch does.
The record (``slurm_printed/test_only.txt``) was made by ``test_slurm_prints_what_is_recorded``
with ``SHIMDIFF_RECORD=DIR``."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from livehelp import user_shims

from gpufleet.model.hostlist import expand
from support.slurm_local import SlurmPool, live
from support.waiting import wait_for

pytestmark = pytest.mark.e2e
RECORD = Path(__file__).parent / "slurm_printed" / "test_only.txt"
USER = "alice"
QUEUES = "queues:\n  - {name: default, weight: 1}\n  - {name: debug, weight: 1}\n"
COMMANDS = [
    "sbatch --test-only --gres=gpu:1 --wrap true",
    "sbatch --test-only -N 2 -n 4 --gres=gpu:1 -t 10 --wrap true",
    "sbatch --test-only -p debug -c 3 --mem=1G --wrap true",
    "sbatch --test-only --parsable -J x --gres=gpu:2 --wrap true",
    "sbatch --test-only --gres=gpu:9 --wrap true",
    "squeue -h -t all -o %j",
]
# with r1 (4 GPUs, 10 min) and r2 (3 GPUs, 60 min) running on the two nodes, nothing pending: the
# time is said in whole minutes from when it was asked
BUSY = [
    ("r1", ["--gres=gpu:4", "-t", "10"]),
    ("r2", ["--gres=gpu:3", "-t", "60"]),
]
BUSY_COMMANDS = [
    "sbatch --test-only --mem=1G --gres=gpu:2 --wrap true",
    "sbatch --test-only --mem=1G --gres=gpu:1 --wrap true",
    "sbatch --test-only --mem=1G -N 2 --gres=gpu:4 --wrap true",
    "sbatch --test-only --mem=1G --begin=now+1hour --gres=gpu:1 --wrap true",
]
LINE = re.compile(r"^sbatch: Job \d+ to start at (\S+) using (\d+) processors on nodes (\S+) in ")


def normalized(text: str, asked: float | None = None) -> str:
    """``asked``: when it was asked, to say the time in minutes from then, else ``DATE``."""

    def one(m: re.Match[str]) -> str:
        when = "DATE" if re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", m[1]) else m[1]
        if asked is not None and when == "DATE":
            at = time.mktime(time.strptime(m[1], "%Y-%m-%dT%H:%M:%S"))
            when = f"in {round((at - asked) / 60)} min"
        nodes = len(expand(m[3]))
        return f"sbatch: Job # to start at {when} using {m[2]} processors on {nodes} nodes in "

    text = LINE.sub(one, text)
    return re.sub(r"partition gpu\b", "partition default", text)


def printed(env: dict[str, str]) -> dict[str, str]:
    """COMMANDS on the idle cluster, then BUSY_COMMANDS with BUSY running."""
    out = {}
    for cmd in COMMANDS:
        out[cmd] = _one(env, cmd, None)
    for name, opts in BUSY:
        argv = ["sbatch", "--parsable", "-o", "/dev/null", "--mem=1G", "-J", name, *opts]
        r = _run(env, [*argv, "--wrap", "sleep 3000"])
        assert r.returncode == 0, r
    running = ["squeue", "-h", "-t", "R", "-o", "%j"]
    wait_for("r1 and r2 to run", lambda: len(_run(env, running).stdout.split()) == 2, 60)
    for cmd in BUSY_COMMANDS:
        out[cmd] = _one(env, cmd, time.time())
    return out


def _run(env: dict[str, str], argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, env=env, cwd=env["PWD"], capture_output=True, text=True,
                          timeout=60)  # fmt: skip


def _one(env: dict[str, str], cmd: str, asked: float | None) -> str:
    r = _run(env, shlex.split(cmd))
    err = normalized(r.stderr, asked) if r.returncode == 0 else "(a refusal)\n"
    return f"rc={r.returncode}\n{r.stdout}--stderr--\n{err if r.stderr else ''}"


def read_record() -> dict[str, str]:
    out: dict[str, str] = {}
    for block in RECORD.read_text().split("### ")[1:]:
        cmd, _, body = block.partition("\n")
        out[cmd] = body
    return out


@pytest.fixture(scope="module")
def gpufleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    with user_shims(tmp_path_factory.mktemp("testonly"), 2, USER, QUEUES) as env:
        yield env


def test_gpufleet_tests_as_slurm_tested(gpufleet: dict[str, str]) -> None:
    got = printed(gpufleet)
    want = read_record()
    assert list(got) == list(want)
    differ = [cmd for cmd in got if got[cmd] != want[cmd]]
    for cmd in differ:
        print(f"--- {cmd}\nSlurm:\n{want[cmd]}\ngpufleet:\n{got[cmd]}")
    assert not differ


@live
def test_slurm_prints_what_is_recorded(
    slurms: SlurmPool, tmp_path_factory: pytest.TempPathFactory
) -> None:
    with slurms.own(nodes=2) as env:  # a new one: the record lists every job (-t all)
        work = tmp_path_factory.mktemp("work")
        got = printed({**env, "PWD": str(work)})
    record = os.environ.get("SHIMDIFF_RECORD")
    if record:
        Path(record, RECORD.name).write_text("".join(f"### {c}\n{got[c]}" for c in got))
    want = read_record()
    differ = [cmd for cmd in got if got[cmd] != want[cmd]]
    for cmd in differ:
        print(f"--- {cmd}\nrecorded:\n{want[cmd]}\nnow:\n{got[cmd]}")
    assert not differ


def test_a_bad_trial_is_refused_with_every_problem_and_nothing_stored(
    gpufleet: dict[str, str],
) -> None:
    listing = ["squeue", "-h", "-t", "all", "-o", "%i"]
    before = _run(gpufleet, listing).stdout
    argv = ["sbatch", "--test-only", "-p", "nope", "--gres=gpu:9", "--wrap", "true"]
    r = _run(gpufleet, argv)
    assert r.returncode == 1 and r.stdout == ""
    assert "nope" in r.stderr and "configuration is not available" in r.stderr, r.stderr
    assert _run(gpufleet, listing).stdout == before
