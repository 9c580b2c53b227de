"""``gpufleet doctor``: the seeds' troubleshooting table (常见问题与排查) as code.

Each finding says what was checked, what was seen, the likely cause and the next step
(``finding``). ``job`` reads a job's state, events and logs through the API and matches known
failure signatures (``signatures``); ``node`` reads a node's state through the API and runs the
node probe on it as a job (or in this process with ``--local``) for the driver, device nodes,
NVML, the network, storage and the clock; ``cluster`` sweeps every node and the recent failed
jobs."""

from gpufleet.ops.doctor.finding import Finding, Severity

__all__ = ["Finding", "Severity"]
