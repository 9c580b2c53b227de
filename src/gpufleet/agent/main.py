"""``run_agent``: build the backend, the client and the agent, run until SIGTERM or SIGINT."""

from __future__ import annotations

import fcntl
import logging
import math
import os
import signal
import socket
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from types import FrameType
from urllib.parse import urlsplit

import httpx

from gpufleet.agent import access, bootid, loops, sharing, slurmbin
from gpufleet.agent.agent import Agent
from gpufleet.agent.config import AgentConfig
from gpufleet.agent.gpu import GpuBackend
from gpufleet.agent.health import HealthLimits
from gpufleet.agent.watchdog import Lease, WatchdogHandle, read_lease
from gpufleet.base.clock import Clock, MonotonicClock
from gpufleet.base.secretfile import private_dir
from gpufleet.client.http import AgentClient
from gpufleet.model import replicas

log = logging.getLogger(__name__)

RESTART = 75  # run_agent's status when an operator asked it to restart (``__main__`` execs)


def make_backend(
    simulate: str | None,
    node: str,
    inject: Sequence[str],
    clock: Clock,
    inbox: Path | None = None,
) -> GpuBackend:
    """``--simulate 8xH100`` (with ``--inject`` faults, and those written to ``inbox`` while
    it runs) or, without it, NVML."""
    if simulate:
        from gpufleet.agent.simgpu import SimulatedGpus

        sim = SimulatedGpus.from_spec(simulate, node, start=clock.now())
        if inbox is not None:
            sim.watch(inbox)
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
    parts = urlsplit(controller_url.split(",")[0].strip())  # URL,URL: controllers in HA
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
    boot_id_file: str | Path = bootid.BOOT_ID,
    check_access: bool = False,
    gpu_sharing: str = "timeslice",
    gpu_replicas: int = 0,
) -> int:
    """Run a node agent until ``stop`` is set or the process gets SIGTERM/SIGINT; returns the
    exit status. Raises ValueError for a bad ``simulate``/``inject`` spec and
    ``GpuUnavailable`` when NVML cannot start (``check_access``: see ``agent/access.py``)."""
    clock = clock or MonotonicClock()
    data = _data(Path(data_dir), check_access)
    backend = make_backend(simulate, node_name, inject, clock, data / "inject")
    client = AgentClient(controller_url, token, ca=ca, transport=transport, timeout=10.0)
    config = AgentConfig(
        node=node_name,
        address=address or local_address(controller_url),
        data_dir=data,
        leaf=leaf,
        pod=pod,
        labels={**(labels or {}), **_sharing_labels(gpu_sharing, gpu_replicas)},
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
    lock = _hold(data)
    agent = Agent(client, backend, config, clock=clock)
    _equip(agent, data, gpu_sharing, gpu_replicas, simulated=bool(simulate))
    # fencing that does not need this process to be alive (or awake): its own process
    agent.watchdog = WatchdogHandle(data)
    agent.watchdog.start(_take_over(agent, data, Path(boot_id_file)))
    stop, handoff = stop or loops.StopEvent(agent._wake_tick), threading.Event()  # wakes ticks
    _stop_on_signals(stop, handoff)
    restart = _restart_on_request(agent, stop, handoff)
    log.info("agent %s → %s (%d GPUs)", node_name, controller_url, len(agent.gpus))
    agent.start()
    try:
        agent.run(stop)
    finally:
        agent.stop(kill_tasks=not handoff.is_set(), grace_s=shutdown_grace_s)
        if handoff.is_set():
            agent.watchdog.leave()  # it keeps our lease on the tasks until the next agent's
        else:
            agent.watchdog.stop()  # after the tasks: it exits and kills nothing
        os.close(lock)
    return RESTART if restart else 0


def _sharing_labels(mode: str, n: int) -> dict[str, str]:
    """The labels that say how this node shares its GPUs; ValueError for replicas other than
    time-sliced ones (MPS clients are bounded by their own share, not a replica count)."""
    if not n:
        return {sharing.LABEL: mode}
    if mode != "timeslice":
        raise ValueError(f"--gpu-replicas needs --gpu-sharing timeslice, got {mode!r}")
    return replicas.labels(n)


def _equip(agent: Agent, data: Path, gpu_sharing: str, n: int, *, simulated: bool) -> None:
    """What tasks find on this node: srun and scontrol, and how a shared GPU is shared."""
    agent.runner.step_bin = str(slurmbin.install(data))
    # MPS on MIG: a control daemon per MIG device, seeing that device alone (by its UUID); the
    # whole GPUs beside them (a mixed node) one daemon of their own, their memory a share's base
    mig = tuple((g.index, g.uuid, g.memory_mib) for g in agent.gpus if g.mig_profile)
    whole = [g for g in agent.gpus if not g.mig_profile]
    memory = min((g.memory_mib for g in whole or agent.gpus), default=0)
    uuids = tuple(g.uuid for g in whole) if mig else ()
    share = sharing.prepare(gpu_sharing, data, memory, simulated=simulated, mig=mig, whole=uuids)
    agent.runner.sharing = replace(share, replicas=n)


def _data(data_dir: Path, check_access: bool) -> Path:
    """The data directory, private; with ``check_access``, ValueError when the accounts tasks
    run as could not reach what the agent runs as them (``agent/access.py``)."""
    data = private_dir(data_dir.expanduser().resolve())
    if check_access:
        access.check(data)
    return data


def _restart_on_request(agent: Agent, stop: threading.Event, handoff: threading.Event) -> list[str]:
    """An operator's restart (an upgrade) exits as SIGHUP does, its tasks left to the next
    agent; the list gets the interpreter it checked. What a previous agent's commands did
    ended unseen (or is this start): reported now."""
    restart: list[str] = []

    def on_restart(python: str) -> None:
        log.warning("restarting for an upgrade (%s); the tasks run on for the next agent", python)
        restart.append(python)
        handoff.set()
        stop.set()

    agent.node_commands.on_restart = on_restart
    agent.node_commands.recover()
    return restart


def _hold(data: Path, wait_s: float = 10.0) -> int:
    """One agent per data directory: a second one would adopt the tasks of the first. The
    kernel drops the lock when its holder dies (waited for: a killed agent may be exiting)."""
    fd = os.open(data / "agent.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    end = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() >= end:
                os.close(fd)
                raise ValueError(
                    f"another agent runs with the data directory {data}: one agent per data "
                    "directory (it would take over that agent's tasks)"
                ) from None
            time.sleep(0.1)


def _take_over(agent: Agent, data: Path, boot_id_file: Path) -> Lease | None:
    """What a previous agent left (ADR 0031): after a reboot, only exits to report (its tasks
    died with the boot: requeued at once); else its tasks that still run are adopted, under
    the lease it published (returned, for our watchdog), until we register. Then the
    containers no task of ours runs, which outlive a killed client."""
    boot = bootid.check(data, boot_id_file)
    carried = None if boot.rebooted else read_lease(data)
    until = carried.until if carried is not None else -math.inf
    adopted = agent.adopt(rebooted=boot.rebooted, fence_until=until)
    agent.runner.sweep_containers()
    bootid.save(data, boot)
    if adopted:
        log.warning("adopted %d task(s) of the previous agent", len(adopted))
        return carried
    return None


def _stop_on_signals(stop: threading.Event, handoff: threading.Event) -> None:
    """SIGTERM and SIGINT set ``stop``: the agent stops its tasks and exits. SIGHUP sets
    ``handoff`` too: it exits for a restart (an upgrade) and its tasks run on, the node's
    watchdog holding them under the last lease until the next agent adopts them (ADR 0031).
    A handler can be installed from the main thread only: an agent run in a test's thread is
    stopped through ``stop`` alone."""
    if threading.current_thread() is not threading.main_thread():
        return

    def on_signal(signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGHUP:
            log.warning("SIGHUP: exiting for a restart; the tasks run on for the next agent")
            handoff.set()
        else:
            log.info("signal %d: shutting down", signum)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
