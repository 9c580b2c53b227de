"""``openb``: Alibaba's openb pod list with its timing columns, as jobs.

A pod is a one-worker job that arrives at ``creation_time`` and runs ``deletion_time -
scheduled_time`` seconds (a pod the real cluster never scheduled runs ``deletion_time -
creation_time``). Fractional ``gpu_milli`` and ``gpu_spec`` model constraints are kept, and
``cpu_milli`` and ``memory_mib``. The queue is the pod's ``qos`` class. (The fill experiment
reads the same files without their times: ``sim/openb.py``.)"""

from __future__ import annotations

from pathlib import Path

from gpufleet.model.errors import SpecError
from gpufleet.model.job import JobSpec
from gpufleet.model.resources import MILLI
from gpufleet.sim.engine import TraceJob
from gpufleet.sim.traces.loader import LoadOptions, TraceFormat, finish
from gpufleet.sim.traces.rows import csv_rows, open_text

OPENB_REQUIRED = (
    "name",
    "cpu_milli",
    "memory_mib",
    "num_gpu",
    "gpu_milli",
    "creation_time",
    "deletion_time",
)
OPENB_OPTIONAL = ("gpu_spec", "qos", "pod_phase", "scheduled_time")


def load_openb_jobs(path: str | Path) -> list[TraceJob]:
    """openb pods with their lifetimes as one-worker jobs; queue = the pod's ``qos`` class."""
    p = Path(path)
    header = _header(p)
    if "creation_time" not in header or "deletion_time" not in header:
        raise SpecError(
            "this pod list has no creation_time/deletion_time columns, so it cannot be replayed "
            "over time (the fill experiment, `gpufleet simulate fill`, needs none)",
            source=str(p),
            field="line 1",
        )
    jobs: list[TraceJob] = []
    seen: dict[str, int] = {}
    for row in csv_rows(p, OPENB_REQUIRED, OPENB_OPTIONAL):
        name = row.text("name")
        if name in seen:
            raise row.error("name", f"pod {name!r} is already on line {seen[name]}")
        seen[name] = row.line
        cpu = row.integer("cpu_milli")
        mem = row.integer("memory_mib")
        gpus = row.integer("num_gpu", maximum=64)
        milli = MILLI
        if gpus:
            milli = min(row.integer("gpu_milli", minimum=1), MILLI)
            if gpus > 1 and milli < MILLI:
                raise row.error(
                    "gpu_milli", f"a pod with num_gpu={gpus} must ask for whole GPUs, got {milli}"
                )
        created = row.number("creation_time")
        deleted = row.number("deletion_time")
        started = row.number("scheduled_time") if row.cells.get("scheduled_time") else created
        if deleted < started:
            raise row.error(
                "deletion_time", f"is before the pod started ({deleted:g} < {started:g})"
            )
        models = tuple(m.strip() for m in row.text("gpu_spec", required=False).split("|") if m)
        spec = JobSpec(
            name=name,
            user="trace",
            queue=row.text("qos", required=False) or "default",
            gpus_per_worker=gpus,
            gpu_milli=milli,
            cpu_milli=cpu,
            memory_mib=mem,
            gpu_models=models if gpus else (),
        )
        jobs.append(TraceJob(name, spec, created, deleted - started))
    return finish(jobs, str(p))


def _header(path: Path) -> list[str]:
    with open_text(path) as fh:
        first = fh.readline()
    return [h.strip() for h in first.strip().split(",")]


def _load(path: Path, options: LoadOptions) -> list[TraceJob]:
    return load_openb_jobs(path)


FORMAT = TraceFormat("openb", _load)
