"""The node's own faults that harm no running task: a full or read-only data directory, a
lease file that cannot be written (ADR 0031).

They are reported as a health Reason with ``jobs_unaffected``: the controller gives the node no
new work and lets its jobs finish; the node returns once the fault is gone. Nothing here kills
a task or lapses the lease (the watchdog hears the lease through its pipe).
"""

from __future__ import annotations

import os
from pathlib import Path

from gpufleet.api.schemas import Health

# less free space than this on the data directory's filesystem is a full disk: a task's log,
# a pid file, the lease file could no longer be written
MIN_FREE_BYTES = 1 << 20


def disk_fault(path: Path) -> str:
    """Why the data directory cannot take writes ("" when it can)."""
    try:
        st = os.statvfs(path)
    except OSError as e:
        return f"cannot read the filesystem of {path}: {e.strerror or e}"
    if st.f_flag & os.ST_RDONLY:
        return f"read-only filesystem on {path}"
    if st.f_bavail * st.f_frsize < MIN_FREE_BYTES:
        return f"disk full on {path}"
    return ""


def with_local_faults(health: Health, data_dir: Path, *faults: str) -> Health:
    """The GPUs' health, with the node's own faults added. A GPU fault stays what it was (it
    stops the jobs on its GPUs); a local fault alone drains the node and spares its jobs."""
    found = [f for f in (disk_fault(data_dir), *faults) if f]
    if not found:
        return health
    why = "; ".join(dict.fromkeys(found))  # in order, each once
    if not health.healthy:
        return health.model_copy(update={"why": f"{health.why}; {why}"[:1000]})
    return Health(healthy=False, why=why[:1000], jobs_unaffected=True)
