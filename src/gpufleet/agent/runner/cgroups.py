"""Which container a process is in: podman and docker put each container's processes in a
cgroup named by its ID (``libpod-<id>``, ``docker-<id>.scope``, ``/docker/<id>``), which the
runtime wrote to the task's cid file (``in_container.cid_path``). A process cannot leave its
cgroup for another container's, so the ID there says whose GPU use a process's is (where its
process group, the runtime's, does not)."""

from __future__ import annotations

import os
import re
from pathlib import Path

_ID = re.compile(r"^[0-9a-f]{64}$")


def container_id(cidfile: Path) -> str:
    """The ID the runtime wrote ("" until it has, or for a runtime that writes none)."""
    try:
        text = cidfile.read_text().strip()
    except OSError:
        return ""
    return text if _ID.match(text) else ""


def cgroups(pid: int) -> str:
    """``/proc/PID/cgroup`` ("" for a process gone, or not to be read)."""
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            return f.read()
    except OSError:
        return ""


def within(pid: int, cid: str) -> bool:
    """Whether the process is in the container's cgroup (not its monitor's: podman's conmon
    has a cgroup of its own that names the ID too, ``libpod-conmon-<id>``)."""
    return any(cid in line and "conmon" not in line for line in cgroups(pid).splitlines())


def a_process_in(cid: str) -> int | None:
    """One process of the container (the lowest pid in its cgroup); None if none."""
    pids = sorted(int(d) for d in os.listdir("/proc") if d.isdigit())
    return next((p for p in pids if within(p, cid)), None)
