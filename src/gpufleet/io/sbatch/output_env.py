"""The variables sbatch itself sets from its options before it sends the job (its "output
environment"), as Slurm 22.05's: they go with the submitted environment, so that the batch
script (and srun, which reads some of them as its own options' defaults) finds them.

Only those the launch does not set from the job's allocation: SLURM_NTASKS, SLURM_CPUS_PER_TASK,
SLURM_MEM_PER_NODE and the per-node counts are the launch's (``core/launch_env.py``)."""

from __future__ import annotations

from gpufleet.io import slurm_values as v
from gpufleet.io.sbatch.request import SlurmRequest


def _gpus(gpus: tuple[v.Gpus, ...]) -> str:
    return ",".join(f"{g.type}:{g.count}" if g.type else str(g.count) for g in gpus)


def output_env(req: SlurmRequest) -> dict[str, str]:
    """``SLURM_GPUS`` for --gpus, ``SLURM_GPUS_PER_NODE`` for --gpus-per-node (not for
    --gres=gpu:N, as sbatch), ``SLURM_GPUS_PER_TASK``, ``SLURM_MEM_PER_CPU`` and the others,
    each only when its option was given."""
    from_gres = sum(1 for g in req.gres if g.name == "gpu")
    per_node = req.gpus_per_node[: len(req.gpus_per_node) - from_gres]
    out = {
        "SLURM_GPUS": _gpus(req.gpus),
        "SLURM_GPUS_PER_NODE": _gpus(per_node),
        "SLURM_GPUS_PER_TASK": _gpus(req.gpus_per_task),
        "SLURM_GPUS_PER_SOCKET": _gpus(req.gpus_per_socket),
    }
    for name, value in (
        ("SLURM_MEM_PER_CPU", req.mem_per_cpu_mb),
        ("SLURM_MEM_PER_GPU", req.mem_per_gpu_mb),
        ("SLURM_CPUS_PER_GPU", req.cpus_per_gpu),
        ("SLURM_NTASKS_PER_GPU", req.ntasks_per_gpu),
    ):
        out[name] = "" if value is None else str(value)
    return {k: x for k, x in out.items() if x}
