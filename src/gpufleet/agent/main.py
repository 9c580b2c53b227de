"""``run_agent``: build the backend, the client and the agent, run until SIGTERM or SIGINT."""

from __future__ import annotations

import logging
import signal
import socket
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import FrameType
from urllib.parse import urlsplit

import httpx

from gpufleet.agent import slurmbin
from gpufleet.agent.agent import Agent, AgentConfig
from gpufleet.agent.gpu import GpuBackend
from gpufleet.agent.health import HealthLimits
from gpufleet.agent.tasks import FENCED, RunnerEvent
from gpufleet.agent.watchdog import WatchdogHandle
from gpufleet.base.clock import Clock, MonotonicClock
from gpufleet.base.secretfile import private_dir
from gpufleet.client.http import AgentClient

log = logging.getLogger(__name__)


def make_backend(
    simulate: str | None, node: str, inject: Sequence[str], clock: Clock
) -> GpuBackend:
    """``--simulate 8xH100`` (with ``--inject`` faults) or, without it, NVML."""
    if simulate:
        from gpufleet.agent.simgpu import SimulatedGpus

        sim = SimulatedGpus.from_spec(simulate, node, start=clock.now())
        for spec in inject:
            for part in spec.split(","):
                if part.strip():
                    sim.inject(part)
        return sim
    if inject:
        raise ValueError("--inject needs --simulate: faults are injected into simulated GPUs")
    from gpufleet.agent.nvml import NvmlBackend

    return NvmlBackend()


def local_address(controller_url: str) -> str:
    """The address of the interface that reaches the controller (what other ranks can reach)."""
    parts = urlsplit(controller_url)
    host = parts.hostname or "127.0.0.1"
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((host, port))  # UDP: picks the route, sends nothing
            return str(s.getsockname()[0])
    except OSError:
        return socket.gethostname()


def run_agent(
    controller_url: str,
    token: str,
    node_name: str,
    simulate: str | None = None,
    data_dir: str | Path = "./gpufleet-agent",
    leaf: str = "leaf-0",
    pod: str = "pod-0",
    labels: Mapping[str, str] | None = None,
    heartbeat_s: float = 5.0,
    *,
    inject: Sequence[str] = (),
    address: str | None = None,
    cpu_cores: float | None = None,
    memory_gib: float | None = None,
    expected_gpus: int | None = None,
    temp_max_c: float = 90.0,
    poll_wait_s: float = 20.0,
    fence_grace_s: float = 2.0,
    shutdown_grace_s: float = 5.0,
    task_env: Mapping[str, str] | None = None,
    container_runtime: str = "",
    stop: threading.Event | None = None,
    transport: httpx.BaseTransport | None = None,
    clock: Clock | None = None,
    ca: str | Path | None = None,
    features: Sequence[str] = (),
    gres_type: str = "",
) -> int:
    """Run a node agent until ``stop`` is set or the process gets SIGTERM/SIGINT; returns the
    exit status. Raises ValueError for a bad ``simulate``/``inject`` spec and
    ``GpuUnavailable`` when NVML cannot start."""
    clock = clock or MonotonicClock()
    data = private_dir(Path(data_dir).expanduser().resolve())
    backend = make_backend(simulate, node_name, inject, clock)
    client = AgentClient(controller_url, token, ca=ca, transport=transport, timeout=10.0)
    config = AgentConfig(
        node=node_name,
        address=address or local_address(controller_url),
        data_dir=data,
        leaf=leaf,
        pod=pod,
        labels=dict(labels or {}),
        features=tuple(features),
        gres_type=gres_type,
        heartbeat_s=heartbeat_s,
        poll_wait_s=poll_wait_s,
        fence_grace_s=fence_grace_s,
        cpu_cores=cpu_cores,
        memory_gib=memory_gib,
        expected_gpus=expected_gpus,
        limits=HealthLimits(temp_max_c=temp_max_c),
        task_env=dict(task_env or {}),
        container_runtime=container_runtime,
    )
    agent = Agent(client, backend, config, clock=clock)
    agent.runner.step_bin = str(slurmbin.install(data))
    _stop_leftovers(agent)
    # fencing that does not need this process to be alive (or awake): its own process
    agent.watchdog = WatchdogHandle(data)
    agent.watchdog.start()

    stop = stop or threading.Event()
    _stop_on_signals(stop)
    log.info("agent %s → %s (%d GPUs)", node_name, controller_url, len(agent.gpus))
    agent.start()
    try:
        agent.run(stop)
    finally:
        agent.stop(grace_s=shutdown_grace_s)
        agent.watchdog.stop()  # after the tasks: it exits and kills nothing
    return 0


def _stop_leftovers(agent: Agent) -> None:
    """Tasks a previous agent left behind run unsupervised: stop them and say so; and their
    containers, which outlive a killed client. Fenced (the node's fault: requeued, not
    charged), before the registration that lists no task (ADR 0031's fast path)."""
    for key in agent.runner.kill_orphans():
        why = f"{FENCED} the agent restarted and cannot supervise it"
        agent.events.put(RunnerEvent("exited", key, 128 + signal.SIGKILL, why).wire())
    agent.runner.sweep_containers()


def _stop_on_signals(stop: threading.Event) -> None:
    """SIGTERM and SIGINT set ``stop`` (a handler can be installed from the main thread only:
    an agent run in a test's thread is stopped through ``stop`` alone)."""
    if threading.current_thread() is not threading.main_thread():
        return

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log.info("signal %d: shutting down", signum)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
