"""The trace formats by name (``--format``), each a module with one loader; adding a format is
writing its module and naming it here."""

from __future__ import annotations

from pathlib import Path

from gpufleet.model.errors import SpecError
from gpufleet.sim.engine import TraceJob
from gpufleet.sim.traces import helios, jobs, openb, pai, philly, sacct, tiresias
from gpufleet.sim.traces.loader import DEFAULT_GPUS_PER_NODE, LoadOptions, TraceFormat

REGISTRY: dict[str, TraceFormat] = {
    f.name: f
    for f in (
        philly.FORMAT,
        tiresias.FORMAT,
        jobs.FORMAT,
        openb.FORMAT,
        sacct.FORMAT,
        pai.FORMAT,
        helios.FORMAT,
    )
}
FORMATS = tuple(REGISTRY)


def load_trace(
    path: str | Path,
    fmt: str,
    *,
    gpus_per_node: int = DEFAULT_GPUS_PER_NODE,
    notes: list[str] | None = None,
) -> list[TraceJob]:
    """The jobs of ``path`` in format ``fmt``, sorted by submit time, first at t = 0.

    ``notes``: what an importer left out and why (jobs that never ran, CPU-only jobs, steps),
    one line each, for the caller to show."""
    trace_format = REGISTRY.get(fmt)
    if trace_format is None:
        raise SpecError(
            f"unknown trace format {fmt!r} (one of {', '.join(FORMATS)})", field="--format"
        )
    options = LoadOptions(gpus_per_node, notes if notes is not None else [])
    return trace_format.load(Path(path), options)
