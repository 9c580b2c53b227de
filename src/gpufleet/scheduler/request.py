"""One worker's demand, as the placement code sees it; a job's shape, as the caches key it."""

from __future__ import annotations

from dataclasses import dataclass, replace

from gpufleet.model.constraint import Constraint
from gpufleet.model.constraint import parse as parse_constraint
from gpufleet.model.job import JobSpec
from gpufleet.model.resources import MILLI


@dataclass(frozen=True, slots=True)
class Select:
    """What beyond resources decides where a job's workers may go (Slurm's -N distinct nodes,
    -w, -x, -C, --exclusive, --mem=0, --gres=gpu:TYPE). The filter plugins read it; the
    workspace caches the nodes that pass per Select."""

    distinct: bool = False  # at most one worker per node
    nodelist: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    constraint: Constraint | None = None
    gres_type: str = ""
    exclusive: bool = False  # a whole idle node per worker
    whole_mem: bool = False  # all of the node's memory per worker
    container: bool = False  # runs in an image: a node with a container runtime
    engines: tuple[tuple[str, int], ...] = ()  # what each GPU must have (model/engines.py)

    @staticmethod
    def of(spec: JobSpec) -> Select | None:
        if not spec.selects_nodes:
            return None
        return Select(
            spec.distinct_nodes and spec.workers > 1,
            spec.nodelist,
            spec.exclude,
            parse_constraint(spec.constraint) if spec.constraint else None,
            spec.gres_type if spec.gpus_per_worker else "",
            spec.exclusive,
            spec.whole_node_memory,
            spec.container is not None,
            spec.gpu_engines if spec.gpus_per_worker else (),
        )

    @property
    def one_per_node(self) -> bool:
        return self.distinct or self.exclusive

    def choices(self) -> tuple[Select, ...]:
        """One Select per choice of a matching OR ``[a|b]`` (every node the same choice)."""
        if self.constraint is None:
            return (self,)
        return tuple(replace(self, constraint=c) for c in self.constraint.choices())


@dataclass(frozen=True, slots=True)
class WorkerRequest:
    gpus: int  # devices per worker (1 when fractional)
    gpu_milli: int  # per device; MILLI for whole GPUs
    cpu_milli: int
    memory_mib: int
    models: tuple[str, ...]  # allowed GPU models; empty = any
    dataset: str = ""
    select: Select | None = None  # None: any node whose resources fit

    @property
    def whole(self) -> bool:
        return self.gpu_milli >= MILLI

    @staticmethod
    def of(spec: JobSpec) -> WorkerRequest:
        return WorkerRequest(
            spec.gpus_per_worker,
            spec.gpu_milli if spec.gpus_per_worker else 0,
            spec.cpu_milli,
            spec.memory_mib,
            spec.gpu_models,
            spec.dataset,
            Select.of(spec),
        )


Shape = tuple[object, ...]


def shape_of(spec: JobSpec) -> Shape:
    """Everything of a job that decides where (and whether) it can be placed: jobs of equal
    shape place alike in one cycle, so the per-cycle caches (failed placements, never fits,
    preemption room, reasons) key on this. The topology as plain values: cheap to hash."""
    t = spec.topology
    return (
        spec.workers,
        spec.gpus_per_worker,
        spec.gpu_milli,
        spec.cpu_milli,
        spec.memory_mib,
        spec.gpu_models,
        spec.dataset,
        t.level,
        t.required,
        spec.distinct_nodes,
        spec.nodelist,
        spec.exclude,
        spec.constraint,
        spec.gres_type,
        spec.exclusive,
        spec.whole_node_memory,
        spec.container is not None,
    )
