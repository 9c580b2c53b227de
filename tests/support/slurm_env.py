"""The environment a batch job and its ``srun`` steps see, captured from a running job and
normalized, so that Slurm's (recorded in ``tests/e2e/slurm_env_22.05.json``) and gpufleet's can
be compared without the ids, times, hosts, paths and pids that differ from run to run.

A job of each shape runs ``DUMP``: the batch shell writes its ``env -0`` and ``srun`` makes every
task write its own. ``capture`` reads them back, one dump per job (an array gives one per task).

What is normalized, and why:
  * the job's id (``{JOB}``) and its array's (``{ARRAY}``): numbers each scheduler draws (which
    of an array's tasks keeps the array's own id differs too: Slurm's last, gpufleet's first);
  * the job's nodes, mapped in the order of its node list to ``n1``, ``n2``…: Slurm's nodes are
    n1..n4, gpufleet's node-0..node-3 (node lists re-compressed after the mapping);
  * pids and ports (``SLURM_TASK_PID``, ``SLURM_SRUN_COMM_PORT``, ``SLURM_STEP_LAUNCHER_PORT``):
    the process's, srun's listening socket's;
  * the submit directory, submit host, user, uid, gid, cluster and partition names and
    ``SLURM_CONF``'s path: each cluster's own (the values' presence is still compared);
  * ``SLURM_WORKING_CLUSTER``'s ``name:addr:port:version:plugin``: the controller's address.
Only the names a job's scripts read are kept: ``SLURM*`` (not ``SLURM_LOCAL_*``, the knobs of
``slurm_local.sh`` in the submitter's environment), the GPU masks and ``ENVIRONMENT``."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from gpufleet.model.hostlist import compress, expand
from support.waiting import wait_for

DUMP = """#!/bin/bash
d=@DUMPS@/${SLURM_ARRAY_JOB_ID:-$SLURM_JOB_ID}.${SLURM_ARRAY_TASK_ID:-x}
mkdir -p "$d"
env -0 > "$d/batch.env"
srun sh -c 'env -0 > "$0/task.$SLURM_PROCID.env"' "$d"
"""

# the shapes compared: sbatch's options (the script is ``dump.sh``, its name the job's)
SHAPES: dict[str, list[str]] = {
    "N1-n1": ["-N1", "-n1"],
    "N2-tpn2-gpn2": ["-N2", "--ntasks-per-node=2", "--gpus-per-node=2"],
    "n3-c2-gres1": ["-n3", "-c2", "--gres=gpu:1"],
    "array": ["--array=0-4:2", "-J", "arr"],
    "N2-gpus2-mem": ["-N2", "--gpus=2", "--mem=2000"],
    "exclusive": ["--exclusive", "-N1"],
    "mem-per-cpu": ["-n2", "--mem-per-cpu=1000", "--gpus-per-task=1"],
    "tpn4-gpt1": ["-N1", "--ntasks-per-node=4", "--gpus-per-task=1"],
    "N2-tpn4-gpt1-c2": ["-N2", "--ntasks-per-node=4", "--gpus-per-task=1", "-c2"],
    "n4-tpn2-gres2": ["-n4", "--ntasks-per-node=2", "--gres=gpu:2"],
    "mem0": ["-N1", "--mem=0"],
    "cpg": ["--cpus-per-gpu=2", "--gpus=2"],
}

KEEP = re.compile(
    r"^(SLURM(?!_LOCAL_)\w*|CUDA_VISIBLE_DEVICES|GPU_DEVICE_ORDINAL|ROCR_VISIBLE_DEVICES|"
    r"ZE_AFFINITY_MASK|ENVIRONMENT)$"
)
_NODE_NAMES = ("SLURMD_NODENAME", "SLURM_TOPOLOGY_ADDR")
_NODE_LISTS = ("SLURM_JOB_NODELIST", "SLURM_NODELIST", "SLURM_STEP_NODELIST")
_FIXED = {
    "SLURM_TASK_PID": "{PID}",
    "SLURM_SRUN_COMM_PORT": "{PORT}",
    "SLURM_STEP_LAUNCHER_PORT": "{PORT}",
    "SLURM_SUBMIT_HOST": "{SUBMIT_HOST}",
    "SLURM_JOB_USER": "{USER}",
    "SLURM_JOB_UID": "{UID}",
    "SLURM_JOB_GID": "{GID}",
    "SLURM_CLUSTER_NAME": "{CLUSTER}",
    "SLURM_JOB_PARTITION": "{PARTITION}",
    "SLURM_CONF": "{CONF}",
    "SLURM_WORKING_CLUSTER": "{WORKING_CLUSTER}",
}

Env = dict[str, str]
Dump = dict[str, Any]  # {"batch": Env, "tasks": [Env, ...]} (tasks by SLURM_PROCID)


def read_env(path: Path) -> Env:
    out: Env = {}
    for item in path.read_bytes().decode(errors="replace").split("\0"):
        name, eq, value = item.partition("=")
        if eq and KEEP.match(name):
            out[name] = value
    return out


def read_dumps(root: Path) -> list[tuple[Env, list[Env]]]:
    """Every job's dump under ``root``: its batch environment and its tasks' in order."""
    out = []
    for d in sorted(root.iterdir()):
        tasks = sorted(d.glob("task.*.env"), key=lambda p: int(p.name.split(".")[1]))
        out.append((read_env(d / "batch.env"), [read_env(t) for t in tasks]))
    return out


def normalize(batch: Env, tasks: Iterable[Env], submit_dir: str) -> Dump:
    nodes = expand(batch["SLURM_JOB_NODELIST"])
    names = {n: f"n{i + 1}" for i, n in enumerate(nodes)}
    ids = {"SLURM_JOB_ID": "{JOB}", "SLURM_JOBID": "{JOB}", "SLURM_ARRAY_JOB_ID": "{ARRAY}"}

    def one(env: Mapping[str, str]) -> Env:
        out = {}
        for k, v in env.items():
            if k in _FIXED:
                v = _FIXED[k]
            elif k in _NODE_NAMES:
                v = names.get(v, v)
            elif k in _NODE_LISTS:
                v = compress([names.get(n, n) for n in expand(v)])
            elif k in ids:
                v = ids[k]
            elif k == "SLURM_SUBMIT_DIR" and v == submit_dir:
                v = "{SUBMIT_DIR}"
            out[k] = v
        return dict(sorted(out.items()))

    return {"batch": one(batch), "tasks": [one(t) for t in tasks]}


def capture(
    sbatch: list[str], options: list[str], env: Mapping[str, str], workdir: Path
) -> list[Dump]:
    """Run ``DUMP`` as a job of ``options`` with ``sbatch``, from ``workdir/submit``, until
    ``squeue`` lists none of its tasks pending or running; its dumps, normalized, an array's
    by task id."""
    workdir.mkdir(parents=True, exist_ok=True)
    submit = workdir / "submit"
    submit.mkdir(exist_ok=True)
    dumps = workdir / "dumps"
    dumps.mkdir(exist_ok=True)
    (workdir / "dump.sh").write_text(DUMP.replace("@DUMPS@", str(dumps)))
    run_env = {**env, "PWD": str(submit)}
    r = subprocess.run(
        [*sbatch, "--parsable", "-o", "/dev/null", *options, str(workdir / "dump.sh")],
        env=run_env, cwd=submit, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 0, f"{options}: {r.returncode}\n{r.stdout}\n{r.stderr}"
    job = r.stdout.strip().split(";")[0]
    squeue = [str(Path(sbatch[0]).with_name("squeue")), "-h", "-j", job, "-o", "%T"]

    def ended() -> bool:
        states = subprocess.run(squeue, env=env, capture_output=True, text=True).stdout.split()
        return not set(states) & {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING"}

    wait_for(f"job {job} {options} to end", ended, timeout_s=120)
    found = [normalize(b, t, str(submit)) for b, t in read_dumps(dumps)]
    return sorted(found, key=lambda d: int(d["batch"].get("SLURM_ARRAY_TASK_ID", 0)))


# What Slurm sets and gpufleet does not, none of which a job's script can use here: why.
SLURM_ONLY = {
    "SLURM_CONF": "the path of slurm.conf: gpufleet has none, and a path to none would mislead",
    "SLURM_WORKING_CLUSTER": "slurmctld's address for Slurm's own commands (the shims ask "
    "gpufleet's controller through their settings)",
    "SLURM_NODE_ALIASES": "cloud nodes' addresses, '(null)' here; deprecated since 23.02",
    "SLURM_JOB_CPUS_PER_NODE_PACK_GROUP_0": "heterogeneous jobs' old name (gpufleet runs none)",
    "SLURM_SRUN_COMM_PORT": "srun's I/O port in Slurm's protocol (gpufleet's srun dials the "
    "step daemons instead)",
    "SLURM_STEP_LAUNCHER_PORT": "the same port, by its other name",
    "SLURMD_TRES_BIND": "slurmd's own note of --gpus-per-task binding",
    "GPU_DEVICE_ORDINAL": "AMD's GPU mask: gpufleet's GPUs are NVIDIA's (CUDA_VISIBLE_DEVICES)",
    "ROCR_VISIBLE_DEVICES": "AMD ROCm's GPU mask (as GPU_DEVICE_ORDINAL)",
    "ZE_AFFINITY_MASK": "Intel Level Zero's GPU mask (as GPU_DEVICE_ORDINAL)",
}
# What gpufleet sets where Slurm sets it only when its option was given: the value the
# allocation holds (Lightning's SLURMEnvironment needs SLURM_NTASKS_PER_NODE), and an empty
# CUDA_VISIBLE_DEVICES for a job without GPUs (none of the node's GPUs is the job's).
GPUFLEET_ONLY = {
    "SLURM_CPUS_PER_TASK", "SLURM_MEM_PER_NODE", "SLURM_NTASKS_PER_NODE", "SLURM_NTASKS",
    "SLURM_NPROCS", "CUDA_VISIBLE_DEVICES", "SLURM_GPUS_ON_NODE", "SLURM_JOB_GPUS",
    "SLURM_STEP_GPUS",
}  # fmt: skip
# Values that differ, by (shape, "batch" or "task", name): why.
VALUES = {
    ("*", "task", "SLURM_DISTRIBUTION"): "gpufleet's srun lays tasks out in blocks only and "
    "says so; Slurm says cyclic when there is one task per node, where both place alike",
    ("exclusive", "batch", "SLURM_TASKS_PER_NODE"): "a job without -n: Slurm counts its CPUs on "
    "the node (8 of --exclusive), gpufleet the job's one task (srun starts one a node in both)",
    ("cpg", "batch", "SLURM_TASKS_PER_NODE"): "the same: --cpus-per-gpu=2 --gpus=2 holds 4 CPUs",
    ("exclusive", "task", "CUDA_VISIBLE_DEVICES"): "Slurm's step in an --exclusive job that asked "
    "no GPUs gets none; gpufleet's gets the node's, which the job holds",
    ("mem-per-cpu", "task", "SLURM_STEP_GPUS"): "Slurm names each task's own GPU; gpufleet, "
    "whose two workers there are two slots of the job, names the step's GPUs on the node",
}


def _allowed(shape: str, where: str, name: str) -> bool:
    return (shape, where, name) in VALUES or ("*", where, name) in VALUES


def differences(shape: str, theirs: Dump, ours: Dump) -> list[str]:
    """Every difference between Slurm's dump and gpufleet's that is not one of the above."""
    out = []
    if len(theirs["tasks"]) != len(ours["tasks"]):
        out.append(f"srun started {len(ours['tasks'])} tasks, Slurm's {len(theirs['tasks'])}")
    pairs = [("batch", "batch", theirs["batch"], ours["batch"])] + [
        ("task", f"task {i}", a, b)
        for i, (a, b) in enumerate(zip(theirs["tasks"], ours["tasks"], strict=False))
    ]
    for kind, where, a, b in pairs:
        for k in sorted(a.keys() - b.keys() - SLURM_ONLY.keys()):
            out.append(f"{where}: {k} missing (Slurm: {a[k]!r})")
        for k in sorted(b.keys() - a.keys() - GPUFLEET_ONLY):
            out.append(f"{where}: {k}={b[k]!r} set, not by Slurm")
        for k in sorted(a.keys() & b.keys()):
            if a[k] != b[k] and not _allowed(shape, kind, k):
                out.append(f"{where}: {k}={b[k]!r}, Slurm's {a[k]!r}")
    return out
