"""The environment each rank of a gang gets: what PyTorch's launcher (torchrun) gives its
workers, and what Slurm gives the tasks of a job step, so that code written for either (and the
libraries that detect them: Lightning, Accelerate, DeepSpeed, submitit) finds what it reads.

The gang's ranks are the tasks of one step, as ``srun`` would start them across the job's
allocation: Slurm's per-task variables (SLURM_PROCID, SLURM_LOCALID, SLURM_NODEID) and its
job-wide ones (SLURM_NTASKS, SLURM_TASKS_PER_NODE in Slurm's ``2(x3)`` form, the node list in
its hostlist syntax). Values Slurm counts in whole CPUs and megabytes are given so.

A worker may stand for several tasks (``tasks_per_worker``: Slurm's --ntasks-per-node, the
node's tasks sharing its GPUs, CPUs and memory): the task counts (SLURM_NTASKS,
SLURM_TASKS_PER_NODE, SLURM_NTASKS_PER_NODE) count tasks, workers × tasks_per_worker, and a
worker's SLURM_PROCID is its first task's; the per-node amounts (SLURM_CPUS_ON_NODE,
SLURM_GPUS_ON_NODE, SLURM_MEM_PER_NODE) are what the node's placements hold."""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import pairwise

from gpufleet.model.allocation import Allocation, nodes_of
from gpufleet.model.arrays import array_name
from gpufleet.model.hostlist import compress
from gpufleet.model.job import JobSpec
from gpufleet.model.resources import MILLI

MASTER_PORT_BASE = 29500
MASTER_PORT_SPAN = 2000
# a batch job's step daemons listen here: below MASTER_PORT's range and the kernel's
# ephemeral ports (32768 on), drawn from the job's number as MASTER_PORT is
STEP_PORT_BASE = 27500
STEP_PORT_SPAN = 2000
CLUSTER_NAME = "gpufleet"
# what torchrun gives its workers beyond the ranks, world size and master (left out of a batch
# job's environment: Slurm starts its tasks, not torchrun)
TORCHRUN_ONLY = (
    "ROLE_NAME", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS",
    "TORCHELASTIC_USE_AGENT_STORE", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK",
    "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE",
)  # fmt: skip  # SLURM_CLUSTER_NAME when the cluster spec names none
# a step's own variables: srun sets them for its tasks; Slurm's batch shell is no step and has
# none (a tool that finds SLURM_STEP_ID takes itself for a step's task)
STEP_ONLY = (
    "SLURM_STEP_ID", "SLURM_STEPID", "SLURM_STEP_NUM_TASKS", "SLURM_STEP_NUM_NODES",
    "SLURM_STEP_NODELIST", "SLURM_STEP_TASKS_PER_NODE", "SLURM_STEP_GPUS",
)  # fmt: skip
# sbatch sets it only from --gpus-per-task (then in the job's submitted environment, io/sbatch/
# output_env.py): a batch job's GPUs per worker are also -N2 --gpus=4's, and srun takes
# SLURM_GPUS_PER_TASK for its own --gpus-per-task
BATCH_FROM_SBATCH = ("SLURM_GPUS_PER_TASK",)


@dataclass(frozen=True, slots=True)
class ArrayFacts:
    array_id: str  # the array's id: its first task's job id, as Slurm's ArrayJobId
    index: int  # this task's
    indices: tuple[int, ...]  # every task's, ascending


@dataclass(frozen=True, slots=True)
class JobFacts:
    """What a launch's environment says of the job beyond where its ranks run."""

    name: str
    user: str
    queue: str
    cpus_per_task: int  # whole CPUs, as Slurm counts them (a fraction rounds up)
    mem_per_task_mib: int
    gpus_per_task: int
    max_restarts: int
    array: ArrayFacts | None = None
    cluster: str = CLUSTER_NAME
    tasks_per_worker: int = 1
    # torchrun's worker variables (TORCHELASTIC_*, ROLE_*, GROUP_*): a plain gang's ranks are
    # started as torchrun starts workers; a batch job's script is Slurm's batch step, and a
    # TORCHELASTIC_RUN_ID would tell Lightning it was launched by torchrun, not Slurm
    torchrun: bool = True
    # NVIDIA_DRIVER_CAPABILITIES (the container toolkit's, enroot's and apptainer's hooks read
    # it): what the driver mounts for its GPUs; "" for a job without GPUs
    driver_capabilities: str = ""

    @staticmethod
    def of(spec: JobSpec, array: ArrayFacts | None = None, cluster: str = "") -> JobFacts:
        tpw = spec.tasks_per_worker
        return JobFacts(
            array_name(spec.name, array.index if array is not None else None),
            spec.user,
            spec.queue,
            max(1, math.ceil(spec.cpu_milli / MILLI / tpw)),
            spec.memory_mib // tpw,
            # a node's GPUs shared by its tasks have no per-task count (Slurm sets none)
            spec.gpus_per_worker if tpw == 1 else 0,
            spec.max_retries,
            array,
            cluster or CLUSTER_NAME,
            tpw,
            torchrun=not spec.batch,
            driver_capabilities=driver_capabilities(spec),
        )


def driver_capabilities(spec: JobSpec) -> str:
    """What a job's GPUs are opened for: ``compute,utility`` (the toolkit's default), with
    ``video`` for the encoders and decoders it asked for, ``graphics,display`` for rendering
    and desktops. Asked-for, not all: ``all`` would mount the graphics stack into every
    training container."""
    if not spec.gpus_per_worker:
        return ""
    own = dict(spec.env).get("NVIDIA_DRIVER_CAPABILITIES")
    if own is not None:  # the job said it itself (its env): as the toolkit takes it
        return own
    wanted = {name for name, _ in spec.gpu_engines}
    caps = ["compute", "utility"]
    if wanted & {"nvenc", "nvdec", "nvjpg"}:
        caps.append("video")
    if wanted & {"graphics", "display"}:
        caps += ["graphics", "display"]
    return ",".join(caps)


def step_port(seq: int, attempt: int) -> int:
    return STEP_PORT_BASE + (seq * 7 + attempt) % STEP_PORT_SPAN


def _cpus(milli: int, tasks_cpus: int) -> int:
    """Whole CPUs on a node: what its placements hold (all of it for --exclusive), at least a
    whole CPU per task as Slurm counts them."""
    return max(math.ceil(milli / MILLI), tasks_cpus)


def per_node_counts(values: list[int]) -> str:
    """Slurm's compressed form of a value per node: ``2(x3),1``."""
    out: list[str] = []
    i = 0
    while i < len(values):
        j = i
        while j < len(values) and values[j] == values[i]:
            j += 1
        n = j - i
        out.append(f"{values[i]}(x{n})" if n > 1 else str(values[i]))
        i = j
    return ",".join(out)


def _array_env(a: ArrayFacts) -> dict[str, str]:
    ix = a.indices or (a.index,)
    gaps = {b - x for x, b in pairwise(ix)}
    return {
        "SLURM_ARRAY_JOB_ID": a.array_id,
        "SLURM_ARRAY_TASK_ID": str(a.index),
        "SLURM_ARRAY_TASK_COUNT": str(len(ix)),
        "SLURM_ARRAY_TASK_MIN": str(ix[0]),
        "SLURM_ARRAY_TASK_MAX": str(ix[-1]),
        "SLURM_ARRAY_TASK_STEP": str(gaps.pop() if len(gaps) == 1 else 1),
    }


def _job_env(job_id: str, attempt: int, f: JobFacts) -> dict[str, str]:
    env = {
        "SLURM_JOB_NAME": f.name,
        "SLURM_JOB_PARTITION": f.queue,
        "SLURM_JOB_USER": f.user,
        "SLURM_CLUSTER_NAME": f.cluster,
        "SLURM_CPUS_PER_TASK": str(f.cpus_per_task),
        # torchrun's worker variables beyond the ranks: one role, the job is the run
        "ROLE_NAME": "default",
        "TORCHELASTIC_RUN_ID": job_id,
        "TORCHELASTIC_RESTART_COUNT": str(attempt - 1),
        "TORCHELASTIC_MAX_RESTARTS": str(f.max_restarts),
        # no elastic agent holds a store: rank 0 serves MASTER_ADDR:MASTER_PORT itself
        "TORCHELASTIC_USE_AGENT_STORE": "False",
        # SLURM_RESTART_COUNT's count, on every attempt (Slurm sets its own only once requeued)
        "GPUFLEET_RESTART_COUNT": str(attempt - 1),
    }
    if not f.torchrun:
        for k in TORCHRUN_ONLY:
            env.pop(k, None)
    if f.gpus_per_task:
        env["SLURM_GPUS_PER_TASK"] = str(f.gpus_per_task)
    if f.driver_capabilities:
        env["NVIDIA_DRIVER_CAPABILITIES"] = f.driver_capabilities
    if attempt > 1:  # Slurm sets it only for a job that was requeued
        env["SLURM_RESTART_COUNT"] = str(attempt - 1)
    if f.array is not None:
        env.update(_array_env(f.array))
    return env


def rank_env(
    job_id: str,
    seq: int,
    attempt: int,
    allocation: Allocation,
    facts: JobFacts | None = None,
) -> tuple[tuple[tuple[str, str], ...], ...]:
    """One environment per rank. MASTER_ADDR is the first node's *name*; the executor that
    knows addresses rewrites it. CUDA_VISIBLE_DEVICES is the agent's to set (it knows UUIDs).
    Without ``facts`` only what the placements say (the ranks, the nodes)."""
    nodes = nodes_of(allocation)
    node_rank = {n: i for i, n in enumerate(nodes)}
    tpw = facts.tasks_per_worker if facts is not None else 1
    on = _OnNode.of(allocation, nodes, tpw)
    counts = [on.tasks[n] for n in nodes]
    shared = _gang_env(job_id, seq, attempt, allocation, nodes, tpw)
    if facts is not None:
        shared.update(_job_env(job_id, attempt, facts))
        cpus = [
            _cpus(on.cpu_milli[n], c * facts.cpus_per_task)
            for n, c in zip(nodes, counts, strict=True)
        ]
        shared["SLURM_TASKS_PER_NODE"] = per_node_counts(counts)
        shared["SLURM_STEP_TASKS_PER_NODE"] = shared["SLURM_TASKS_PER_NODE"]
        shared["SLURM_JOB_CPUS_PER_NODE"] = per_node_counts(cpus)
    local_counter: dict[str, int] = {}
    out = []
    for rank, p in enumerate(allocation):
        local = local_counter.get(p.node, 0)  # this worker's process, among the node's
        local_counter[p.node] = local + 1
        per_node = on.tasks[p.node]
        env = {
            **shared,
            "RANK": str(rank),
            "LOCAL_RANK": str(local),
            "LOCAL_WORLD_SIZE": str(per_node // tpw),  # torchrun's: processes started
            "NODE_RANK": str(node_rank[p.node]),
            "GROUP_RANK": str(node_rank[p.node]),
            "ROLE_RANK": str(rank),
            "SLURM_PROCID": str(rank * tpw),
            "SLURM_LOCALID": str(local * tpw),
            "SLURM_NODEID": str(node_rank[p.node]),
            "SLURMD_NODENAME": p.node,
            # tasks per node as placed (sbatch sets it from --ntasks-per-node; a gang whose
            # nodes hold different counts gets its own node's)
            "SLURM_NTASKS_PER_NODE": str(per_node if len(set(counts)) > 1 else counts[0]),
        }
        if facts is not None:
            env.update(on.facts_env(p.node, facts))
            if not facts.torchrun:
                _as_batch(env, p.node)
        out.append(tuple(sorted(env.items())))
    return tuple(out)


def _as_batch(env: dict[str, str], node: str) -> None:
    """A batch job's rank as Slurm's batch step: no torchrun or step variables; the batch
    shell's own (its task id, its node's place in the topology, ENVIRONMENT=BATCH)."""
    for k in (*TORCHRUN_ONLY, *STEP_ONLY, *BATCH_FROM_SBATCH):
        env.pop(k, None)
    env.update(
        ENVIRONMENT="BATCH",
        SLURM_GTIDS="0",
        SLURM_TOPOLOGY_ADDR=node,
        SLURM_TOPOLOGY_ADDR_PATTERN="node",
    )


def _gang_env(
    job_id: str, seq: int, attempt: int, allocation: Allocation, nodes: tuple[str, ...], tpw: int
) -> dict[str, str]:
    """What every rank of the gang is told alike: the rendezvous, the sizes, the job and its
    one step."""
    world = len(allocation)
    ntasks = world * tpw
    port = MASTER_PORT_BASE + (seq * 7 + attempt) % MASTER_PORT_SPAN
    nodelist = compress(nodes)
    return {
        "MASTER_ADDR": nodes[0],
        "MASTER_PORT": str(port),
        "WORLD_SIZE": str(world),
        "GROUP_WORLD_SIZE": str(len(nodes)),
        "ROLE_WORLD_SIZE": str(world),
        "GPUFLEET_JOB_ID": job_id,
        "GPUFLEET_ATTEMPT": str(attempt),
        "SLURM_JOB_ID": job_id,
        "SLURM_JOBID": job_id,
        "SLURM_NTASKS": str(ntasks),
        "SLURM_NPROCS": str(ntasks),
        "SLURM_NNODES": str(len(nodes)),
        "SLURM_JOB_NODELIST": nodelist,
        "SLURM_NODELIST": nodelist,
        "SLURM_JOB_NUM_NODES": str(len(nodes)),
        # the gang is one step of the job, as srun starts it
        "SLURM_STEP_ID": "0",
        "SLURM_STEPID": "0",
        "SLURM_STEP_NUM_TASKS": str(ntasks),
        "SLURM_STEP_NUM_NODES": str(len(nodes)),
        "SLURM_STEP_NODELIST": nodelist,
    }


@dataclass(frozen=True)
class _OnNode:
    """What the gang's placements hold on each of its nodes."""

    tasks: dict[str, int]
    gpus: dict[str, set[int]]
    cpu_milli: dict[str, int]
    memory_mib: dict[str, int]

    @staticmethod
    def of(allocation: Allocation, nodes: tuple[str, ...], tpw: int) -> _OnNode:
        on = _OnNode(
            {n: 0 for n in nodes},
            {n: set() for n in nodes},
            dict.fromkeys(nodes, 0),
            dict.fromkeys(nodes, 0),
        )
        for p in allocation:
            on.tasks[p.node] += tpw
            on.gpus[p.node].update(p.gpus)
            on.cpu_milli[p.node] += p.cpu_milli
            on.memory_mib[p.node] += p.memory_mib
        return on

    def facts_env(self, node: str, facts: JobFacts) -> dict[str, str]:
        """Slurm's per-node amounts: what the node's placements hold (at least its tasks')."""
        per_node = self.tasks[node]
        gpus = ",".join(map(str, sorted(self.gpus[node])))
        return {
            "SLURM_CPUS_ON_NODE": str(_cpus(self.cpu_milli[node], per_node * facts.cpus_per_task)),
            "SLURM_MEM_PER_NODE": str(
                max(self.memory_mib[node], per_node * facts.mem_per_task_mib)
            ),
            "SLURM_GPUS_ON_NODE": str(len(self.gpus[node])),
            "SLURM_JOB_GPUS": gpus,
            "SLURM_STEP_GPUS": gpus,
        }
