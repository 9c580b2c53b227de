"""``gpufleet submit``'s flags as the job spec's fields, without typer, pydantic or the
#SBATCH reader: the typer command (``cli/jobs/``) and its fast path (``cli/submit_fast.py``)
both map them here, so that they agree."""

from __future__ import annotations

TYPE_CHECKING = False  # no typing at run time: a command starts on few imports (issue 27)
if TYPE_CHECKING:
    from typing import Any, NoReturn


def fail(message: str, *, code: int) -> NoReturn:
    """``cli.output.fail``, imported only when a flag is refused (rich: a few ms, issue 27)."""
    from gpufleet.cli.output import fail as refuse

    refuse(message, code=code)


def flag_overrides(
    *,
    name: str | None,
    queue: str | None,
    workers: int | None,
    gpus: int | None,
    gpu_share: float | None,
    cpus: float | None,
    mem: str | None,
    gpu_model: list[str] | None,
    time_limit: str | None,
    priority: int | None,
    preemptible: bool | None,
    topology: str | None,
    strict_topology: bool,
    dataset: str | None,
    retries: int | None,
    env: list[str] | None,
    signal: str | None = None,
    requeue: bool | None = None,
    reservation: str | None = None,
    min_runtime: str | None = None,
) -> dict[str, Any]:
    """The spec fields the flags set, in JobSpec's names; bad values exit 2."""
    o: dict[str, Any] = {
        "name": name,
        "queue": queue,
        "workers": workers,
        "gpus_total": gpus,  # sbatch's --gpus: the job's in all, split over its workers
        "gpu_milli": round(gpu_share * 1000) if gpu_share is not None else None,
        "cpus": cpus,
        "gpu_models": list(gpu_model) if gpu_model else None,
        "priority": priority,
        "preemptible": preemptible,
        "dataset": dataset,
        "max_retries": retries,
        "signal": signal,  # read (and refused, naming it) by JobSpec.from_dict
        "requeue": requeue,
        "reservation": reservation,
    }
    if queue is not None and "," in queue:  # sbatch's -p a,b: the job may use any of them
        o["queue"], o["queues"] = None, queue
    if gpu_share is not None and gpus is None:
        o["gpus_per_worker"] = 1  # a share is of one GPU
    if mem is not None:
        from gpufleet.io.slurm_values import parse_memory  # only for --mem, --time: dataclasses

        try:
            o["memory_mib"] = parse_memory(mem)
        except ValueError as e:
            fail(f"--mem {mem}: {e}", code=2)
    if time_limit is not None:
        from gpufleet.io.slurm_values import parse_time

        try:
            o["time_limit_s"] = parse_time(time_limit) or 0  # 0: no limit
        except ValueError as e:
            fail(f"--time {time_limit}: {e}", code=2)
    if min_runtime is not None:
        from gpufleet.io.slurm_values import parse_time

        try:
            o["min_runtime_s"] = parse_time(min_runtime) or 0
        except ValueError as e:
            fail(f"--min-runtime {min_runtime}: {e}", code=2)
    if topology is not None:
        o["topology"] = {"level": topology, "required": strict_topology}
    elif strict_topology:
        fail("--strict-topology needs --topology LEVEL", code=2)
    if env:
        pairs = [e.partition("=") for e in env]
        bad = [e for e, (k, eq, _) in zip(env, pairs, strict=True) if not eq or not k]
        if bad:
            fail(f"--env {bad[0]!r}: expected KEY=VALUE", code=2)
        o["env"] = {k: v for k, _, v in pairs}
    return {k: v for k, v in o.items() if v is not None}


def merge_spec(spec: dict[str, Any], overrides: dict[str, Any]) -> None:
    """The flags over a file's or a script's values, as sbatch's options over its lines;
    ``--gpus`` (the job's GPUs in all, as sbatch's) split evenly over the job's workers
    (SpecError when they do not divide, as sbatch's --gpus in a script)."""
    env = {**spec.get("env", {}), **overrides.get("env", {})}
    if "queue" in overrides or "queues" in overrides:  # -p replaces the file's queues
        spec.pop("queue", None)
        spec.pop("queues", None)
    total = overrides.get("gpus_total")
    spec.update({k: x for k, x in overrides.items() if k != "gpus_total"})
    if env:
        spec["env"] = env
    if "memory_mib" in overrides:
        spec.pop("memory_gib", None)  # the flag replaces the file's amount, in any unit
    if total is not None:
        spec["gpus_per_worker"] = gpus_per_worker(total, spec.get("workers", 1))


def gpus_per_worker(total: int, workers: object) -> int:
    """``--gpus N`` over a job of ``workers``: N ÷ workers each, or SpecError."""
    n = workers if isinstance(workers, int) and not isinstance(workers, bool) and workers > 0 else 1
    if total % n:
        from gpufleet.model.errors import SpecError

        raise SpecError(
            f"--gpus {total} does not divide among {n} workers: --gpus is the job's GPUs in "
            f"all, as sbatch's (give a multiple of {n}, or --gpus-per-task)"
        )
    return total // n
