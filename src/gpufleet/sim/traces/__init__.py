"""Trace loaders: real GPU-cluster workloads as ``TraceJob`` lists for the simulator.

``load_trace(path, fmt)`` reads a file in one of :data:`FORMATS` (``registry``), each format
a module of its own: ``philly`` (Microsoft Philly, via Pollux), ``tiresias``, ``jobs``
(gpufleet's own, as ``gpufleet history export`` writes it), ``openb`` (Alibaba's pod list with
its times), and the job histories people already have: ``sacct`` (Slurm), ``pai`` (Alibaba PAI
2020) and ``helios`` (SenseTime). Each module's docstring says what it reads and how.

Every loader refuses a malformed row with ``SpecError(source=file, field="line N: column")``
(``rows``), accepts rows in any order (sorted by submit time, stably, so equal times keep file
order) and shifts times so that the first submission is at t = 0 (``loader.finish``).

Trace jobs ask for GPUs only (``cpu_milli = memory_mib = 0``) unless the format says more (jobs,
openb, sacct, pai, helios): the GPU traces record no CPU or memory, and an invented figure would
make the replay depend on it. Each job's time limit is then set by a :class:`TimeLimit`
(``limits``).
"""

from gpufleet.sim.traces.limits import TimeLimit, apply_time_limits
from gpufleet.sim.traces.loader import DEFAULT_GPUS_PER_NODE
from gpufleet.sim.traces.registry import FORMATS, load_trace

__all__ = ["DEFAULT_GPUS_PER_NODE", "FORMATS", "TimeLimit", "apply_time_limits", "load_trace"]
