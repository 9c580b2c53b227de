"""Ports that tests on parallel pytest-xdist workers must not share.

The controller's services listen on ports of a fixed range (31500 on, ``ServerConfig``'s
default); two controllers in two workers would both hand out 31500 first. So each worker
serves its in-process controllers' endpoints from a slice of its own of 31500-32499, and the
live clusters (``LocalCluster``, whose controllers pick a free range themselves) take theirs
from 32500-32767, which no in-process controller uses. The ports that a job's number decides
(a batch job's step daemons, MASTER_PORT) and those a node hands its replicas (from 20000 up)
come from blocks each live cluster claims (``--job-ports``, ``--replica-ports``:
``ops/portblocks.py``), so no test shares a worker for its ports."""

from __future__ import annotations

import os

IN_PROCESS = range(31500, 32500)
LIVE = range(32500, 32768)


def worker() -> tuple[int, int]:
    """This worker's index and the number of workers (0 and 1 outside xdist)."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    index = int(name[2:]) if name.startswith("gw") and name[2:].isdigit() else 0
    return index % max(1, count), max(1, count)


def gateway_ports() -> dict[str, int]:
    """``ServerConfig`` settings for an in-process controller: this worker's slice."""
    index, count = worker()
    span = len(IN_PROCESS) // count
    return {"gateway_port_base": IN_PROCESS.start + index * span, "gateway_port_span": span}


def use_live_range() -> None:
    """Live clusters started in this process pick their endpoints' ports from ``LIVE``."""
    from gpufleet.ops import localcluster

    localcluster.GATEWAY_PORTS = LIVE
