"""Why a job waits, as squeue and scontrol print it, against what a real Slurm 22.05 printed for
the same jobs (scheduler/slurm_words.py): two nodes of 4 GPUs (slurm_local.sh with
SLURM_LOCAL_NODES=2; gpufleet: two agents of 4 GPUs), partitions ``gpu`` (Slurm's default;
gpufleet's ``default``) and ``debug`` over both, every job ``--mem=1G``.

r1 (2 GPUs, 10 min) and r2 (4 GPUs, 60 min, in debug) run; p1 (4 GPUs) waits for n1 at r1's end:
Resources. s1 (1 GPU, 5 min) ends before that and starts (Slurm's backfill, within its 30 s);
s2 (2 GPUs, 60 min) would delay p1, s3 (3 GPUs) fits nowhere, the array's tasks and d2 come
after: Priority. d1, the first waiting job of debug, whose nodes gpu's waiting jobs hold, gets
Slurm's words for that; m1 (debug and gpu) waits behind both: Priority. (r2 runs in debug so
that gpufleet's fair share, its default order, takes gpu's waiting jobs first, as Slurm's
priority, by submission, does here: the order is not what is compared.)

The record (``slurm_printed/reasons.txt``) was made by ``test_slurm_prints_what_is_recorded``
with ``SHIMDIFF_RECORD=DIR``; that test compares a live Slurm with it where Slurm is installed,
and the first one runs without Slurm."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from livehelp import user_shims

from support.slurm_local import SlurmPool, live
from support.waiting import wait_for

pytestmark = pytest.mark.e2e
RECORD = Path(__file__).parent / "slurm_printed" / "reasons.txt"
USER = "alice"  # gpufleet's user: no Unix account (gpufleet never runs a job as root)
QUEUES = "queues:\n  - {name: default, weight: 1}\n  - {name: debug, weight: 1}\n"
SLEEP = ["--wrap", "sleep 3000"]
# (name, sbatch options) in the order submitted; {gpu}: the default partition's name
JOBS = [
    ("r1", ["--gres=gpu:2", "-t", "10"]),
    ("r2", ["-p", "debug", "--gres=gpu:4", "-t", "60"]),
    ("p1", ["--gres=gpu:4", "-t", "30"]),
    ("s1", ["--gres=gpu:1", "-t", "5"]),
    ("s2", ["--gres=gpu:2", "-t", "60"]),
    ("s3", ["--gres=gpu:3", "-t", "5"]),
    ("d1", ["-p", "debug", "--gres=gpu:3", "-t", "5"]),
    ("d2", ["-p", "debug", "--gres=gpu:1", "-t", "100"]),
    ("ar", ["--array=1-3", "--gres=gpu:2", "-t", "60"]),
    ("m1", ["-p", "debug,{gpu}", "--gres=gpu:1", "-t", "100"]),
]
COMMANDS = [
    "squeue -h -o '%j|%P|%T|%r'",
    "squeue -h -r -o '%j|%K|%T|%r'",
    "squeue -h -t PD -o '%.4j %R'",
    "squeue -h -p debug -O Name,Reason:100",
    "scontrol -o show job {d1}",
    "scontrol -o show job {s2}",
]


def submit(env: dict[str, str], gpu: str) -> dict[str, str]:
    """Each of JOBS submitted, r1 and r2 once running: name → job id."""
    ids: dict[str, str] = {}
    for name, opts in JOBS:
        argv = ["sbatch", "--parsable", "-o", "/dev/null", "--mem=1G", "-J", name]
        r = run(env, argv + [o.format(gpu=gpu) for o in opts] + SLEEP)
        assert r.returncode == 0, r
        ids[name] = r.stdout.strip().split(";")[0]
        if name == "r2":
            wait_for("r1 and r2 to run", lambda: running(env) >= {"r1", "r2"}, 60)
    return ids


def run(env: dict[str, str], argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, env=env, cwd=env["PWD"], capture_output=True, text=True,
                          timeout=60)  # fmt: skip


def running(env: dict[str, str]) -> set[str]:
    return set(run(env, ["squeue", "-h", "-t", "R", "-o", "%j"]).stdout.split())


def settled(env: dict[str, str]) -> bool:
    """s1 started (Slurm's backfill: every 30 s) and every job told why it waits."""
    why = run(env, ["squeue", "-h", "-t", "PD", "-o", "%r"]).stdout.split("\n")
    return "s1" in running(env) and "None" not in why


def printed(env: dict[str, str], gpu: str) -> dict[str, str]:
    """The jobs submitted, settled, and COMMANDS' output: Slurm's job lines of scontrol cut to
    the words compared (JobName, JobState, Reason), its partition ``gpu`` as gpufleet's."""
    ids = submit(env, gpu)
    wait_for("the jobs to settle", lambda: settled(env), 120, every_s=1.0)
    out = {}
    for cmd in COMMANDS:
        r = run(env, shlex.split(cmd.format(**ids)))
        text = r.stdout
        if cmd.startswith("scontrol"):
            text = " ".join(re.findall(r"\b(?:JobName|JobState|Reason)=\S+", text)) + "\n"
        text = re.sub(r"\bgpu\b", "default", text) if gpu == "gpu" else text
        out[cmd] = f"rc={r.returncode}\n{text}"
    return out


def read_record() -> dict[str, str]:
    out: dict[str, str] = {}
    for block in RECORD.read_text().split("### ")[1:]:
        cmd, _, body = block.partition("\n")
        out[cmd] = body
    return out


@pytest.fixture(scope="module")
def gpufleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    with user_shims(tmp_path_factory.mktemp("reasons"), 2, USER, QUEUES) as env:
        yield env


def test_gpufleet_says_why_as_slurm_said(gpufleet: dict[str, str]) -> None:
    got = printed(gpufleet, "default")
    want = read_record()
    differ = [cmd for cmd in COMMANDS if got[cmd] != want[cmd]]
    for cmd in differ:
        print(f"--- {cmd}\nSlurm:\n{want[cmd]}\ngpufleet:\n{got[cmd]}")
    assert not differ


@live
def test_slurm_prints_what_is_recorded(
    slurms: SlurmPool, tmp_path_factory: pytest.TempPathFactory
) -> None:
    with slurms.own(nodes=2) as env:
        work = tmp_path_factory.mktemp("work")
        got = printed({**env, "PWD": str(work)}, "gpu")
    record = os.environ.get("SHIMDIFF_RECORD")
    if record:
        Path(record, RECORD.name).write_text("".join(f"### {c}\n{got[c]}" for c in COMMANDS))
    want = read_record()
    differ = [cmd for cmd in COMMANDS if got[cmd] != want[cmd]]
    for cmd in differ:
        print(f"--- {cmd}\nrecorded:\n{want[cmd]}\nnow:\n{got[cmd]}")
    assert not differ
