"""A :class:`SlurmRequest` as a JobSpec mapping: with ``--nodes`` (or ``--ntasks-per-node``)
one worker per node on distinct nodes, its tasks sharing the node's GPUs, CPUs and memory; with
only ``--ntasks``, one worker per task (with GPUs per node too, the tasks in one worker on one
node). What a JobSpec cannot express yet is refused here, at submit time, saying what gpufleet
cannot do; the other terms are in ``terms``."""

from __future__ import annotations

import math
from typing import Any

from gpufleet.io import slurm_values as v
from gpufleet.io.sbatch.request import CANNOT, Build, SbatchJob
from gpufleet.io.sbatch.shards import shard_milli
from gpufleet.io.sbatch.terms import container, dependencies, nodes_terms, priority, signal
from gpufleet.model.arrays import parse_array
from gpufleet.model.engines import CAPABILITIES
from gpufleet.model.errors import SpecError
from gpufleet.model.limits import SPEC_BOUNDS


def build_job(b: Build, command: list[str]) -> SbatchJob:
    """The job: ``nodes × tasks per node`` workers, each with the same GPUs, CPUs and memory,
    running ``command`` as Slurm's batch step."""
    r = b.req
    spec = job_terms(b)
    spec["command"] = command
    _batch(b, spec)
    return SbatchJob(
        spec,
        r.array,
        dependencies(b),
        r.output,
        r.error,
        warnings=tuple(b.notes),
        request=r,
    )


def job_terms(b: Build) -> dict[str, Any]:
    """The spec of the request but its command and its batch files: name, queues, workers and
    their resources, time limit, priority, signal, requeue and container (the array's size
    checked from its text)."""
    r = b.req
    spec: dict[str, Any] = {"name": r.job_name}
    if r.partitions:
        # -p a,b: the job may start in any of them (Slurm: the one offering the earliest
        # start; gpufleet: the first that admits it, scheduler/admission.py)
        parts = list(dict.fromkeys(r.partitions))
        if len(parts) > 1:
            spec["queues"] = parts
        else:
            spec["queue"] = parts[0]
    _resources(b, spec)
    if r.time_limit is not None and r.time_limit != v.UNLIMITED:
        spec["time_limit_s"] = float(r.time_limit * 60)
    nice_priority = priority(b)
    if nice_priority is not None:
        spec["priority"] = nice_priority
    warning = signal(b)
    if warning is not None:
        spec["signal"] = warning
    if r.requeue is not None:
        spec["requeue"] = r.requeue
    if r.kill_on_invalid_dep is not None:  # ADR 0072
        spec["kill_invalid_dep"] = r.kill_on_invalid_dep
    if r.hold:  # -H/--hold: submitted held, a user hold (ADR 0074)
        spec["hold"] = True
    if r.begin_time:  # --begin: not started before (Reason BeginTime; a past one: at once)
        spec["begin_time"] = r.begin_time
    image = container(b)
    if image is not None:
        spec["container"] = image
    if r.array is not None:
        try:  # the size is checked from the text, nothing is expanded
            parse_array(r.array, max_size=b.max_array_size)
        except SpecError as e:
            raise b.err(f"{b.text('array')}: {e.reason}", "array") from None
    return spec


def _resources(b: Build, spec: dict[str, Any]) -> None:
    """Workers, their GPUs, CPUs and memory, and the nodes they may run on, into ``spec``."""
    r = b.req
    by_node, workers, per = _layout(b)
    spec["workers"] = workers
    if by_node:
        if workers > 1:
            spec["distinct_nodes"] = True
        if per > 1:
            spec["tasks_per_worker"] = per
    elif workers > 1:  # Slurm packs the tasks of a job without --nodes where it can
        spec["topology"] = {"level": "node", "required": False}
    milli = shard_milli(b)  # --gres=shard:1: one replica (io/sbatch/shards.py)
    gpus, gres_type = (1, "") if milli is not None else _gpus(b, by_node, workers, per)
    most = SPEC_BOUNDS["gpus_per_worker"][1]
    if gpus > most:  # Slurm: more GPUs on a node than any has, refused at submit in its words
        ways = [n for n in ("gres", "gpus-per-node", "gpus", "gpus-per-task") if n in b.seen]
        raise b.err(
            f"Requested node configuration is not available: {gpus} GPUs on one node "
            f"({', '.join(b.text(n) for n in ways)}); no gpufleet node has more than {most}",
            *ways,
        )
    spec["gpus_per_worker"] = gpus
    if milli is not None:
        spec["gpu_milli"] = milli
    engines = {g.name: 1 for g in r.gres if g.name in CAPABILITIES}
    if engines:  # each of its GPUs has the engine (the count is of GPUs, as Slurm's GRES)
        if max(g.count for g in r.gres if g.name in engines) > max(gpus, 1):
            raise b.err(f"{b.text('gres')} asks for more GPUs with engines than GPUs", "gres")
        spec["gpu_engines"] = engines
    if gres_type:
        spec["gres_type"] = gres_type
    cpus: int | None = None
    if r.cpus_per_gpu is not None:
        cpus = r.cpus_per_gpu * max(gpus, 1)
    elif r.cpus_per_task is not None or per > 1:
        cpus = (r.cpus_per_task or 1) * per  # a worker's tasks, cpus-per-task each
    if cpus is not None:
        spec["cpus"] = cpus
    mem = _memory(b, by_node, workers, cpus or 1, gpus)
    if mem == 0 and r.mem_per_node_mb == 0:
        spec["whole_node_memory"] = True
        spec["memory_mib"] = 0
    elif mem is not None:
        spec["memory_mib"] = mem
    spec.update(nodes_terms(b))
    whole = [k for k in ("exclusive", "whole_node_memory") if spec.get(k)]
    if whole and not by_node and workers > 1:  # Slurm would let the tasks share a node
        b.note(
            "exclusive" if "exclusive" in whole else "mem",
            f"without --nodes each of the {workers} tasks takes a whole node "
            f"({'--exclusive' if 'exclusive' in whole else '--mem=0'}); give --nodes=1 "
            f"--ntasks-per-node={workers} to run them on one",
        )


def _batch(b: Build, spec: dict[str, Any]) -> None:
    """Slurm's batch job: the script once, on the first node, its output in its files (the
    working directory and the environment are the submitter's: the CLI adds them)."""
    r = b.req
    spec["batch"] = True
    spec["output"] = r.output
    if "error" in b.seen:
        spec["error"] = r.error
    if r.open_mode is not None:
        spec["open_mode"] = r.open_mode
    if r.input:
        spec["input"] = "/dev/null" if r.input.lower() == "none" else r.input


def _layout(b: Build) -> tuple[bool, int, int]:
    """(by node, workers, tasks per worker), from sbatch's counts: with --nodes (or
    --ntasks-per-node, or -w) one worker per node and the node's tasks in it; with only
    --ntasks one worker per task."""
    r = b.req
    lo, hi = r.nodes
    if lo != hi:
        raise b.err(
            f"{CANNOT}{b.text('nodes')} asks for {lo} to {hi} nodes; a gpufleet job "
            "has a fixed number of nodes (give one number)",
            "nodes",
        )
    nodes = lo or 1
    by_node = r.nodes_set or r.ntasks_per_node is not None
    if not by_node and r.ntasks > 1 and r.gpus_per_node:
        return _packed(b)
    if not by_node:
        return False, max(r.ntasks, 1), 1
    if r.ntasks % nodes:
        raise b.err(
            f"{CANNOT}{b.text('ntasks')} do not divide evenly over {nodes} nodes: "
            "every gpufleet node runs the same number of tasks",
            "ntasks",
            "nodes",
        )
    per = max(r.ntasks // nodes, 1)
    if r.ntasks_per_node is not None and per > r.ntasks_per_node:
        raise b.err(
            f"{b.text('ntasks')} needs {per} tasks per node, more than {b.text('ntasks-per-node')}",
            "ntasks",
            "nodes",
            "ntasks-per-node",
        )
    return True, nodes, per


def _packed(b: Build) -> tuple[bool, int, int]:
    """``-n N`` with GPUs per node (``--gres=gpu:G``, ``--gpus-per-node``) and no ``--nodes``:
    Slurm chooses the node count, one node when one has room for the N tasks and that node's
    GPUs and memory (Slurm 22.05 on an idle cluster), more when none has, each with the GPUs
    and memory per node. A gpufleet job has a fixed node count: the tasks run on one node."""
    r = b.req
    gpus = "gres" if "gres" in b.seen else "gpus-per-node"
    b.note(
        "ntasks",
        f"{b.text('ntasks')} with {b.text(gpus)} and no --nodes: Slurm chooses the node count; "
        f"gpufleet runs the {r.ntasks} tasks on one node (Slurm's choice where one has room), "
        "sharing its GPUs and memory; give --nodes to spread them",
    )
    return True, 1, r.ntasks


def _gpus(b: Build, by_node: bool, workers: int, per: int) -> tuple[int, str]:
    """(GPUs per worker, the site's GPU type name or "")."""
    r = b.req
    engines = {g.name: g.count for g in r.gres if g.name in CAPABILITIES}
    other = [g for g in r.gres if g.name not in ("gpu", "shard") and g.name not in engines]
    if other:
        raise b.err(
            f"{CANNOT}{b.text('gres')}: generic resources other than GPUs "
            f"({', '.join(g.name for g in other)}) are not scheduled",
            "gres",
        )
    ways = {
        "gpus-per-node": r.gpus_per_node,
        "gpus": r.gpus,
        "gpus-per-task": r.gpus_per_task,
        "gpus-per-socket": r.gpus_per_socket,
    }
    given = [k for k, x in ways.items() if x]
    names = [n for n in ("gres", "gpus-per-node", "gpus", "gpus-per-task") if n in b.seen]
    if len(given) > 1 or len(r.gpus_per_node) > 1:
        raise b.err(
            CANNOT + "GPUs are asked for more than one way ("
            + " and ".join(b.text(n) for n in names) + "); give them one way",
            *names,
        )  # fmt: skip
    if not given:  # --gres=nvenc:N alone: N GPUs per node that have NVENC
        return max(engines.values(), default=0), ""  # Slurm gives no GPU unless asked
    way = given[0]
    if way == "gpus-per-socket":
        raise b.err(f"{CANNOT}{b.text(way)}: GPUs per socket", way)
    if len(ways[way]) > 1:
        raise b.err(f"{CANNOT}{b.text(way)}: GPUs of several types at once", way)
    g = ways[way][0]
    name = way if way != "gpus-per-node" or "gpus-per-node" in b.seen else "gres"
    gres_type = (g.type or "").lower()
    if way == "gpus-per-task":
        return g.count * per, gres_type  # a worker's tasks, each its own GPUs
    if way == "gpus-per-node":  # without --nodes, the tasks are on one node (_packed)
        return g.count, gres_type  # the node's GPUs, shared by its tasks
    if g.count % workers:  # --gpus: for the whole job
        what = "nodes" if by_node else "tasks"
        raise b.err(
            f"{CANNOT}{b.text(name)} does not divide among {workers} {what}: every "
            "gpufleet worker gets the same number of GPUs",
            name,
            *[x for x in ("nodes", "ntasks-per-node", "ntasks") if x in b.seen],
        )
    return g.count // workers, gres_type


def _memory(b: Build, by_node: bool, workers: int, cpus: float, gpus: int) -> int | None:
    """MiB per worker: --mem per node (0: all of it), --mem-per-cpu × its CPUs,
    --mem-per-gpu × its GPUs."""
    r = b.req
    if r.mem_per_node_mb is not None:
        if r.mem_per_node_mb == 0 or by_node:
            return r.mem_per_node_mb
        # without --nodes the tasks may share a node: each task a share of one node's
        return max(r.mem_per_node_mb // max(workers, 1), 1)
    if r.mem_per_cpu_mb is not None:
        return math.ceil(r.mem_per_cpu_mb * cpus)
    if r.mem_per_gpu_mb is not None:
        if gpus == 0:
            raise b.err(
                f"{CANNOT}{b.text('mem-per-gpu')} but the job asks for no GPU",
                "mem-per-gpu",
            )
        return r.mem_per_gpu_mb * gpus
    return None
