"""Readiness and liveness probes of a service's replicas, as the kubelet runs them.

Three parts, cut as the rest of the agent is (events in, decisions out; one clock), in
``book`` (pure: what the agent's state machine may import), ``run`` and ``executor``:

* ``ProbeState``: the pure state machine of one probe of one replica (a task and a kind,
  ``readiness`` or ``liveness``). It says when the next probe is due (``next_due``) and what a
  result changes (``on_result``: a ``Transition``, or None). It never sleeps and never reads
  a clock: the caller passes ``now``.
* ``Probes``: the node's book of them. The agent's tick calls ``due(now)`` (the probes to run
  now, each marked in flight: a probe never overlaps its own previous run) and hands what
  finished to ``results(...)``, which gives the ``ReplicaProbe`` records to report.
* ``ProbeExecutor``: runs probes for real, in a bounded thread pool, so one that hangs holds
  one worker for at most its own timeout and the others go on. HTTP (GET, 200–399 is a
  success), TCP (a connection opens) and command probes (argv run as the task's account, in
  its environment and its private /tmp, in a process group of its own that is killed whole at
  the timeout). Each result carries a short reason: ``HTTP 503``, ``connect refused``,
  ``timed out after 1 s``, ``exit 2: <last stderr line>``.

Semantics (Kubernetes' "Configure Liveness, Readiness and Startup Probes"): the first probe
runs ``initial_delay_s`` after the task started, then every ``period_s`` (10) after the start
of the previous one; each has ``timeout_s`` (1). A replica is ready after
``success_threshold`` (1) consecutive successes and unready after ``failure_threshold`` (3)
consecutive failures; it starts unready, and when it reaches the failure threshold before it
was ever ready that is reported once too (the controller then has a reason to show). Liveness
starts alive; ``failure_threshold`` consecutive failures declare the replica dead (reported
once; the probe stops and the controller kills and replaces the replica); its
``success_threshold`` must be 1, as Kubernetes requires.

A replica's port is the controller's (``core/services.py``), given to the task as ``$PORT``; a
probe that names no port probes ``$PORT`` from the task's environment.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpufleet.agent.probes.book import (
        KINDS,
        Due,
        ProbeKind,
        ProbeResult,
        Probes,
        ProbeState,
        ProbeTarget,
        ReplicaProbe,
        Transition,
        probes_of,
    )
    from gpufleet.agent.probes.executor import ProbeExecutor, free_port, tick
    from gpufleet.agent.probes.run import command_probe, http_probe, run_probe, tcp_probe

# imported when first used: the pure book (what the agent's state machine imports) loads no
# HTTP client, socket or thread pool with the package
_HOMES = {
    "KINDS": "book",
    "Due": "book",
    "ProbeKind": "book",
    "ProbeResult": "book",
    "Probes": "book",
    "ProbeState": "book",
    "ProbeTarget": "book",
    "ReplicaProbe": "book",
    "Transition": "book",
    "probes_of": "book",
    "ProbeExecutor": "executor",
    "free_port": "executor",
    "tick": "executor",
    "command_probe": "run",
    "http_probe": "run",
    "run_probe": "run",
    "tcp_probe": "run",
}

__all__ = [
    "KINDS",
    "Due",
    "ProbeExecutor",
    "ProbeKind",
    "ProbeResult",
    "ProbeState",
    "ProbeTarget",
    "Probes",
    "ReplicaProbe",
    "Transition",
    "command_probe",
    "free_port",
    "http_probe",
    "probes_of",
    "run_probe",
    "tcp_probe",
    "tick",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)
