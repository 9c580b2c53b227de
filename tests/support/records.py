"""The drills' long jobs: a shell script whose ranks append lines ("start JOB ATTEMPT", ...) to a
records file the test reads, which says from the tasks' own side what ran and how often."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any


def shell_job(name: str, script: str, gpus: int = 8, **spec: Any) -> dict[str, Any]:
    """A job spec running ``script`` under /bin/sh, one CPU and 1 GiB a rank."""
    return {
        "name": name,
        "gpus_per_worker": gpus,
        "cpus": 1,
        "memory_gib": 1,
        "command": ["/bin/sh", "-c", script],
        **spec,
    }


def lines(records: Path) -> Counter[str]:
    """How often each line stands in ``records`` (none yet: nothing ran)."""
    try:
        return Counter(records.read_text().splitlines())
    except FileNotFoundError:
        return Counter()
