"""The counts sbatch works out before it sends a job (its ``_opt_verify``): tasks from nodes
and tasks per node, nodes from a node list, the default output file; and the GRES requests
newer sbatch refuses that older sbatch took (said, not refused)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from gpufleet.io import slurm_values as v
from gpufleet.io.sbatch.options import no_effect_warnings, read_options
from gpufleet.io.sbatch.request import SlurmRequest, where
from gpufleet.io.slurm_opts import Given, Problem


def apply(
    given: Sequence[Given], source: str, max_array_size: int
) -> tuple[SlurmRequest, list[Problem]]:
    """Set each option in order (a later one wins, as in sbatch), check each value as sbatch
    does, then work out the counts as sbatch's _opt_verify does."""
    f, last, problems = read_options(given, max_array_size)
    req, nodes_problem = verify(f, source)
    if nodes_problem:
        at = max((last[k] for k in ("nodes", "nodelist") if k in last), key=lambda g: g.line)
        problems.append(Problem(at.line, nodes_problem))
    gpus = sum(g.count for g in req.gpus)
    if req.gpus and req.nodes_set and gpus < req.nodes[0]:  # the controller's check (22.05)
        problems.append(
            Problem(
                last["gpus"].line,
                f"{last['gpus'].text}: fewer GPUs than nodes ({req.nodes[0]}): Invalid generic "
                "resource (gres) specification (--gpus < -N)",
            )
        )
    warnings = _gres_warnings(req, last, source) + no_effect_warnings(last, source)
    return replace(req, warnings=req.warnings + warnings), problems


def _gres_warnings(req: SlurmRequest, last: dict[str, Given], source: str) -> tuple[str, ...]:
    """What newer sbatch refuses in its GRES check and older sbatch took: said, not refused, so
    a script written for an older Slurm still reads."""
    out: list[str] = []
    if req.gpus_per_task and not req.ntasks_set and not req.gpus:
        g = last["gpus-per-task"]
        out.append(
            f"{where(source, g.line)}{g.text} without -n/--ntasks or --gpus: sbatch 23.11 and "
            "later refuse this ('--gpus-per-task or --tres-per-task used without either --gpus "
            "or -n/--ntasks is not allowed')"
        )
    gpus = req.gpus + req.gpus_per_node + req.gpus_per_task + req.gpus_per_socket
    if len({g.type is None for g in gpus}) > 1:
        kinds = ("gres", "gpus", "gpus-per-node", "gpus-per-task", "gpus-per-socket")
        g = max((last[k] for k in kinds if k in last), key=lambda x: x.line)
        out.append(
            f"{where(source, g.line)}GPUs asked for with and without a type: newer sbatch "
            "refuses this ('Invalid GRES specification (with and without type identification)')"
        )
    return tuple(out)


@dataclass(slots=True)
class _Counts:
    """Nodes and tasks as sbatch settles them."""

    lo: int
    hi: int
    nodes_set: bool
    ntasks: int
    ntasks_set: bool
    warnings: list[str]
    problem: str  # sbatch's refusal of a node count the node list does not fit ("" when none)


def _counts(f: dict[str, Any], source: str) -> _Counts:
    warnings: list[str] = []
    problem = ""
    nodes_set = "nodes" in f
    lo, hi = f.get("nodes", (1, 0))
    nodelist = f.get("nodelist")
    if nodelist:
        count = v.hostlist_count(nodelist)
        if count is not None:
            lo = max(count, lo) if nodes_set else count
            nodes_set = True
            if hi and lo > hi:  # -w names more nodes than -N allows
                problem = f"invalid number of nodes (-N {lo}-{hi}): the node list names {count}"
    per_node = f.get("ntasks_per_node")
    ntasks_set = "ntasks" in f
    ntasks = f.get("ntasks", 1)
    if per_node and not ntasks_set and (hi == 0 or lo == hi):
        ntasks, ntasks_set = lo * per_node, True
    elif nodes_set and (lo == hi or hi == 0) and not ntasks_set:
        ntasks = max(lo, 1)  # one task per node
    elif nodes_set and ntasks_set:
        if hi and ntasks < hi:
            hi = ntasks
        if ntasks < lo:
            warnings.append(
                f"{source}: can't run {ntasks} processes on {lo} nodes, setting nnodes to "
                f"{ntasks} (as sbatch does)"
            )
            lo = hi = ntasks
    if nodes_set and hi == 0:
        hi = lo
    if not nodes_set and ntasks_set and per_node:
        lo = hi = -(-ntasks // per_node)  # as slurm_opt_create_job_desc
    return _Counts(lo, hi, nodes_set, ntasks, ntasks_set, warnings, problem)


# The fields an option sets under the request's own name, with the request's own default
_AS_GIVEN = (
    "cpus_per_task", "cpus_per_gpu", "gpus", "gpus_per_task", "gpus_per_socket",
    "ntasks_per_gpu", "mem_per_node_mb", "mem_per_cpu_mb", "mem_per_gpu_mb", "time_min",
    "partitions", "dependency", "dependencies", "dependency_any", "input", "constraint",
    "exclude", "exclusive", "reservation", "signal", "requeue", "kill_on_invalid_dep",
    "container_image",
    "container_mounts", "container_workdir", "chdir", "export", "export_file", "open_mode",
    "account", "qos", "mail_type", "mail_user", "hint", "priority", "nice", "hold", "begin_time",
)  # fmt: skip


WRAP_SOURCE = "--wrap"  # the source of a script that sbatch --wrap made


def default_name(source: str) -> str:
    """sbatch's job name when -J is not given: ``wrap`` for ``--wrap`` (Slurm's own), else the
    script's file name."""
    return "wrap" if source == WRAP_SOURCE else Path(source).name


def verify(f: dict[str, Any], source: str) -> tuple[SlurmRequest, str]:
    """The request sbatch sends, from the options' fields, and its refusal of a node count
    the node list does not fit ("" when none)."""
    c = _counts(f, source)
    gres = f.get("gres", ())
    from_gres = tuple(v.Gpus(g.type, g.count) for g in gres if g.name == "gpu")
    array = f.get("array")
    output = f.get("output") or ("slurm-%A_%a.out" if array else "slurm-%j.out")
    req = SlurmRequest(
        script=source,
        job_name=f.get("job_name") or default_name(source),
        nodes=(c.lo, c.hi if c.nodes_set else c.lo),
        nodes_set=c.nodes_set,
        ntasks=c.ntasks,
        ntasks_set=c.ntasks_set,
        ntasks_per_node=f.get("ntasks_per_node"),
        gres=gres,
        gpus_per_node=f.get("gpus_per_node_opt", ()) + from_gres,
        time_limit=f.get("time"),
        array=array,
        output=output,
        error=f.get("error") or output,
        nodelist=f.get("nodelist"),
        other=tuple(f.get("other", {}).items()),
        warnings=tuple(c.warnings),
        **{k: f[k] for k in _AS_GIVEN if k in f},
    )
    return req, c.problem
