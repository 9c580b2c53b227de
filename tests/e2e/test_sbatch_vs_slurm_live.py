"""gpufleet against the real Slurm, side by side (issue 23): the same sbatch options given to
``gpufleet submit --dry-run`` and to Slurm 22.05's ``sbatch`` (``shared/tools/slurm_local.sh``:
four nodes of 8 CPUs, 16000 MB and 4 fake GPUs each, on loopback, idle), and the allocation
Slurm makes compared with the job gpufleet would run: its nodes and GPUs per node, or the same
refusal; job names and node lists as Slurm writes them.

Skipped where Slurm is not installed (``apt-get install slurm-wlm munge``); each case waits for
its Slurm job to end, so that the next one finds the cluster idle."""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
from typing import Any

import pytest

from gpufleet.io import sbatch_command
from gpufleet.model.hostlist import compress
from support.slurm_local import LIVE
from support.waiting import wait_for

pytestmark = list(LIVE)


def slurm_allocation(env: dict[str, str], options: list[str]) -> list[int] | str:
    """The GPUs Slurm gave each node of a job of ``options`` (read while it runs, then
    cancelled and waited out), or sbatch's refusal."""
    r = subprocess.run(
        ["sbatch", "--parsable", "-o", "/dev/null", *options, "--wrap", "sleep 300"],
        env=env, capture_output=True, text=True,
    )  # fmt: skip
    if r.returncode:
        return r.stderr
    job = r.stdout.strip().split(";")[0]

    def show() -> str:
        return subprocess.run(
            ["scontrol", "-d", "show", "job", job], env=env, capture_output=True, text=True
        ).stdout

    out = wait_for(f"Slurm job {job} to run", lambda: "JobState=RUNNING" in (o := show()) and o)
    subprocess.run(["scancel", job], env=env, check=True)
    wait_for(f"Slurm job {job} to end", lambda: "JobState=CANCELLED" in show(), timeout_s=60)
    # "     Nodes=n[1-2] CPU_IDs=0 Mem=16000 GRES=gpu:1(IDX:0)": one line per group of nodes
    per_node: list[int] = []
    for nodes, gres in re.findall(r"^\s+Nodes=(\S+) .*?(?:GRES=gpu:(\d+).*)?$", out, re.M):
        hosts = subprocess.run(
            ["scontrol", "show", "hostnames", nodes], env=env, capture_output=True, text=True
        ).stdout.split()
        per_node += [int(gres or 0)] * len(hosts)
    return per_node


def gpufleet_allocation(options: list[str]) -> list[int] | str:
    """The GPUs of each node of the job ``gpufleet submit OPTIONS -- true`` would run (on an
    idle cluster of those nodes), or its refusal."""
    r = subprocess.run(
        [sys.executable, "-m", "gpufleet.cli", "submit", "--dry-run", "--json", *options,
         "--", "true"],
        capture_output=True, text=True,
        env={**os.environ, "GPUFLEET_SERVER": "http://127.0.0.1:9", "GPUFLEET_TOKEN": "x"},
    )  # fmt: skip
    if r.returncode:
        return r.stderr
    spec: dict[str, Any] = json.loads(r.stdout)["spec"]
    workers, gpus = spec.get("workers", 1), spec.get("gpus_per_worker", 1)
    if spec.get("distinct_nodes") or workers == 1:
        return [gpus] * workers
    return [gpus * workers]  # one node holds them all on an idle cluster (preferred packing)


@pytest.mark.parametrize(
    "options",
    [
        ["-n", "4", "--gres=gpu:1", "--mem", "8G"],  # issue 23's script: Slurm packs the tasks
        ["-N", "2", "--gpus", "2"],  # --gpus: the job's, one on each node
        ["-N", "2", "--ntasks-per-node=2", "--gpus-per-task=1"],
        ["-N", "2", "--gpus-per-node=3"],
        ["--gres=gpu:2"],
    ],
    ids=" ".join,
)
def test_the_job_gpufleet_runs_is_the_allocation_slurm_makes(
    shared_slurm: dict[str, str], options: list[str]
) -> None:
    assert gpufleet_allocation(options) == slurm_allocation(shared_slurm, options)


def test_what_slurm_refuses_gpufleet_refuses(shared_slurm: dict[str, str]) -> None:
    options = ["-N", "3", "--gpus", "1"]
    theirs, ours = slurm_allocation(shared_slurm, options), gpufleet_allocation(options)
    assert isinstance(theirs, str) and "Invalid generic resource (gres) specification" in theirs
    assert isinstance(ours, str) and "Invalid generic resource (gres) specification" in ours


def test_a_wrap_jobs_name(shared_slurm: dict[str, str]) -> None:
    r = subprocess.run(
        ["sbatch", "--parsable", "-o", "/dev/null", "--wrap", "true"],
        env=shared_slurm, capture_output=True, text=True, check=True,
    )  # fmt: skip
    shown = subprocess.run(
        ["scontrol", "show", "job", r.stdout.strip()],
        env=shared_slurm, capture_output=True, text=True,
    ).stdout  # fmt: skip
    theirs = re.search(r"JobName=(\S+)", shown)
    ours = sbatch_command.read(
        ["--wrap=true"], script=lambda p: "", environ={}, cwd="/tmp", host="h"
    ).spec["name"]
    assert theirs is not None and ours == theirs.group(1) == "wrap"


def test_node_lists_as_scontrol_show_hostlist_writes_them(shared_slurm: dict[str, str]) -> None:
    rng = random.Random(23)
    for _ in range(40):
        names = [
            f"{rng.choice(['gpu-', 'n', 'a'])}{n:0{rng.choice([1, 2, 3])}d}"
            for n in (rng.randrange(0, 120) for _ in range(rng.randrange(1, 8)))
        ]
        names = list(dict.fromkeys(names))
        theirs = subprocess.run(
            ["scontrol", "show", "hostlist", ",".join(names)],
            env=shared_slurm, capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
        assert compress(names) == theirs, names
