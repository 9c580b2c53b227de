"""Where a step's tasks go: how many on each of the job's node slots, as srun lays out a step
inside its allocation (block distribution), and each task's environment."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from itertools import accumulate
from typing import Any

from gpufleet.model.hostlist import compress
from gpufleet.slurm.srun_opts import Options, SrunError

_PER_NODE = re.compile(r"^(\d+)(?:\(x(\d+)\))?$")
# the variables of the torchrun launch env that describe a rank: a step's task gets its own
_TORCH_RANKS = ("RANK", "LOCAL_RANK", "ROLE_RANK", "NODE_RANK", "GROUP_RANK")
_LOGIN = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "TMPDIR", "LANG")


def per_node(text: str) -> list[int]:
    """Slurm's ``2(x3),1`` back into one count per node; [] when it is not that."""
    out: list[int] = []
    for part in filter(None, text.split(",")):
        m = _PER_NODE.match(part.strip())
        if not m:
            return []
        out += [int(m[1])] * int(m[2] or 1)
    return out


def per_node_text(values: Sequence[int]) -> str:
    out: list[str] = []
    i = 0
    while i < len(values):
        j = i
        while j < len(values) and values[j] == values[i]:
            j += 1
        out.append(f"{values[i]}(x{j - i})" if j - i > 1 else str(values[i]))
        i = j
    return ",".join(out)


def capacities(env: Mapping[str, str], slots: int) -> list[int]:
    """The job's tasks on each slot, from its ``SLURM_TASKS_PER_NODE`` (or its task count
    spread evenly when that names nodes, not slots)."""
    counts = per_node(env.get("SLURM_TASKS_PER_NODE", ""))
    if len(counts) == slots:
        return counts
    total = env.get("SLURM_NTASKS", "")
    return even(int(total) if total.isdigit() and int(total) > 0 else slots, slots)


def even(n: int, k: int) -> list[int]:
    base, extra = divmod(n, k)
    return [base + (1 if i < extra else 0) for i in range(k)]


def fill(n: int, caps: Sequence[int]) -> list[int]:
    out = []
    for c in caps:
        take = min(c, n)
        out.append(take)
        n -= take
    return out


def plan(o: Options, caps: Sequence[int], warn: list[str]) -> list[int]:
    """Tasks per slot (a prefix of the job's slots; 0 where a slot has none)."""
    slots = len(caps)
    n = o.ntasks if "ntasks" in o.explicit else None
    nodes = o.nodes if "nodes" in o.explicit else None
    k = o.ntasks_per_node if "ntasks_per_node" in o.explicit else None
    if nodes is not None and nodes > slots:
        raise SrunError(
            f"Unable to create step: -N {nodes} asks for more nodes than the job has ({slots})"
        )
    if n is None and k is None and nodes is None:
        return list(caps)  # the job's own tasks, as it was allocated
    if k is not None:
        nodes = nodes or slots
        if n is None:
            n = nodes * k
        elif n > nodes * k:
            raise SrunError(f"-n {n} is more than --ntasks-per-node={k} on {nodes} nodes")
    if nodes is not None:
        n = nodes if n is None else n
        if n < nodes:
            warn.append(f"can't run {n} processes on {nodes} nodes, setting nnodes to {n}")
            nodes = n
        return even(n, nodes) + [0] * (slots - nodes)
    assert n is not None
    if n > sum(caps):
        if not o.overcommit:
            raise SrunError(
                f"Unable to create step: More processors requested than permitted "
                f"(-n {n}; the job holds {sum(caps)} tasks; -O to overcommit)"
            )
        return even(n, slots)
    return fill(n, caps)


def base_env(env: Mapping[str, str], export: str) -> dict[str, str]:
    """srun's ``--export``: ALL (its whole environment), NONE (only SLURM_* — and the
    login basics and gpufleet's own, which a task needs to run at all), or a list of names
    and NAME=value, with ALL among them to keep the rest."""
    items = [x for x in export.split(",") if x]
    keep_all = "ALL" in items
    if keep_all:
        out = dict(env)
    else:
        out = {k: v for k, v in env.items() if k.startswith(("SLURM_", "GPUFLEET_")) or k in _LOGIN}
    for item in items:
        if item in ("ALL", "NONE"):
            continue
        name, eq, value = item.partition("=")
        if eq:
            out[name] = value
        elif name in env:
            out[name] = env[name]
    return out


def task_envs(
    base: Mapping[str, str],
    layout: Sequence[int],
    nodes: Mapping[int, dict[str, Any]],
    *,
    step_id: int,
    launch_addr: str,
    o: Options,
) -> dict[int, list[tuple[int, dict[str, str]]]]:
    """Per slot used, its tasks' (procid, environment). ``nodes``: each used slot's node
    info (the step daemon's handshake, or srun's own node's)."""
    used = [i for i, c in enumerate(layout) if c]
    step = _step_env(layout, used, nodes, step_id, launch_addr, o)
    # two slots of a job may be one node (two workers placed there): one node of the step,
    # its tasks numbered across both, as Slurm numbers a node's tasks
    names = [str(nodes[i]["name"]) for i in used]
    node_ids = {n: i for i, n in enumerate(dict.fromkeys(names))}
    starts = list(accumulate((layout[i] for i in used), initial=0))
    on_node = {
        n: [p for k, m in enumerate(names) if m == n for p in _ids(starts, k)] for n in names
    }
    out: dict[int, list[tuple[int, dict[str, str]]]] = {}
    for k, slot in enumerate(used):
        info = nodes[slot]
        count = layout[slot]
        gpus = [str(g) for g in info.get("gpus", [])]
        procids = _ids(starts, k)
        name = names[k]
        g = o.gpus_per_task or 0
        if g and count * g > len(gpus):
            raise SrunError(
                f"Unable to create step: --gpus-per-task={g} for {count} tasks needs "
                f"{count * g} GPUs on node {info['name']}, which holds {len(gpus)} for the job"
            )
        node = _node_env(info, step, node_ids[name], on_node[name], g)
        tasks = []
        for local, p in enumerate(procids):
            env = {k: v for k, v in base.items() if k not in _TORCH_RANKS}
            env.update(node)
            nth = str(on_node[name].index(p))  # among the node's tasks
            env.update(SLURM_PROCID=str(p), RANK=str(p), ROLE_RANK=str(p))
            env.update(SLURM_LOCALID=nth, LOCAL_RANK=nth)
            if g:
                mine = slice(local * g, (local + 1) * g)
                env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus[mine])
                job_gpus = [str(x) for x in info.get("job_gpus", [])]
                if len(job_gpus) == len(gpus):  # the slot's GPUs by index: the task's own
                    env["SLURM_STEP_GPUS"] = ",".join(job_gpus[mine])
            tasks.append((p, env))
        out[slot] = tasks
    return out


def _ids(starts: Sequence[int], k: int) -> list[int]:
    return list(range(starts[k], starts[k + 1]))


def _step_env(
    layout: Sequence[int],
    used: list[int],
    nodes: Mapping[int, dict[str, Any]],
    step_id: int,
    launch_addr: str,
    o: Options,
) -> dict[str, str]:
    """What every task of the step is told alike: the step, its size and its nodes."""
    ntasks = sum(layout)
    per: dict[str, int] = {}
    for i in used:
        name = str(nodes[i]["name"])
        per[name] = per.get(name, 0) + layout[i]
    nodelist = compress(list(per))
    tpn = per_node_text(list(per.values()))
    step = {
        "SLURM_STEP_ID": str(step_id),
        "SLURM_STEPID": str(step_id),
        "SLURM_STEP_NUM_TASKS": str(ntasks),
        "SLURM_NTASKS": str(ntasks),
        "SLURM_NPROCS": str(ntasks),
        "SLURM_STEP_NUM_NODES": str(len(per)),
        "SLURM_NNODES": str(len(per)),
        "SLURM_STEP_NODELIST": nodelist,
        "SLURM_NODELIST": nodelist,
        "SLURM_STEP_TASKS_PER_NODE": tpn,
        "SLURM_TASKS_PER_NODE": tpn,
        "SLURM_DISTRIBUTION": "block",
        "SLURM_LAUNCH_NODE_IPADDR": launch_addr,
        "SLURM_SRUN_COMM_HOST": launch_addr,
        "WORLD_SIZE": str(ntasks),
        "ROLE_WORLD_SIZE": str(ntasks),
        "GROUP_WORLD_SIZE": str(len(per)),
    }
    if o.cpus_per_task:
        step["SLURM_CPUS_PER_TASK"] = str(o.cpus_per_task)
    if o.gpus_per_task:
        step["SLURM_GPUS_PER_TASK"] = str(o.gpus_per_task)
    return step


def _node_env(
    info: dict[str, Any], step: dict[str, str], node_id: int, procids: list[int], g: int
) -> dict[str, str]:
    """What the tasks on one node are told alike: the node's own environment, the step's, the
    node's place in the step and its GPUs (``g`` per task, or all of them)."""
    gpus = [str(x) for x in info.get("gpus", [])]
    job_gpus = [str(x) for x in info.get("job_gpus", [])]
    step_gpus = job_gpus[: len(procids) * g] if g and len(job_gpus) == len(gpus) else job_gpus
    node = {
        **{str(k): str(v) for k, v in dict(info.get("env", {})).items()},
        **step,
        "SLURM_NODEID": str(node_id),
        "NODE_RANK": str(node_id),
        "GROUP_RANK": str(node_id),
        "SLURMD_NODENAME": str(info["name"]),
        "SLURM_TOPOLOGY_ADDR": str(info["name"]),
        "SLURM_TOPOLOGY_ADDR_PATTERN": "node",
        "SLURM_GTIDS": ",".join(map(str, procids)),
        "LOCAL_WORLD_SIZE": str(len(procids)),
        "SLURM_JOB_GPUS": ",".join(job_gpus),
        "SLURM_STEP_GPUS": ",".join(step_gpus),
        "CUDA_VISIBLE_DEVICES": ",".join(gpus),
    }
    if not job_gpus:
        del node["SLURM_JOB_GPUS"], node["SLURM_STEP_GPUS"]
    return node
