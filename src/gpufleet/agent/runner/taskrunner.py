"""``TaskRunner``: the node's live tasks, behind the calls the agent makes (launch, kill, poll,
and at startup kill_orphans and sweep_containers). The steps are modules of their own:
``launch`` (and ``in_container``), ``supervise`` (deadlines and signals), ``exits``."""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Container, Mapping, Sequence
from pathlib import Path
from typing import Any

from gpufleet.agent import containers, sandbox
from gpufleet.agent.accounts import LaunchRefused, own_account
from gpufleet.agent.gpu import DeviceRef, TaskUse
from gpufleet.agent.probes.book import ProbeTarget
from gpufleet.agent.runner import adopt, cgroups, checkpoints, exits, metricsfile, supervise
from gpufleet.agent.runner.in_container import Containers, cid_path
from gpufleet.agent.runner.launch import Launcher, note, refusal
from gpufleet.agent.runner.process import LiveTask, exit_status, signal_scope, write_pidfile
from gpufleet.agent.runner.taskhost import TaskHost
from gpufleet.agent.sharing import Sharing
from gpufleet.agent.tasks import EXIT_REFUSED, Key, LatestAttempts, RunnerEvent
from gpufleet.api.schemas import AgentCommand, TaskRef
from gpufleet.base.clock import Clock, MonotonicClock
from gpufleet.model.notice import EVICTION_KILLS, StopNotice

log = logging.getLogger(__name__)


class TaskRunner:
    def __init__(
        self,
        data_dir: Path,
        visible_devices: Callable[[Sequence[int]], str],
        clock: Clock | None = None,
        node_env: Mapping[str, str] | None = None,
        *,
        as_root: bool | None = None,
        container_runtime: containers.Runtime | None = None,
        device_refs: Callable[[Sequence[int]], Sequence[DeviceRef]] | None = None,
    ) -> None:
        self.host = TaskHost(
            data_dir=Path(data_dir),
            visible_devices=visible_devices,
            as_root=os.geteuid() == 0 if as_root is None else as_root,
            agent=own_account(),
            device_refs=device_refs,
            node_env=dict(node_env or {}),
        )
        self.clock = clock or MonotonicClock()
        if not self.as_root:
            log.warning(
                "the agent is not root: every task runs as its user %s (uid %d), whoever owns "
                "the job",
                self.host.agent.name,
                self.host.agent.uid,
            )
        self.containers = Containers(self.host, container_runtime, self.clock)
        self._launcher = Launcher(self.host, self.containers)
        self._live: dict[Key, LiveTask] = {}
        # a podman or docker task's container ID, and the process the simulated GPU says is
        # its (cgroups.py); forgotten when the task is reaped
        self._cids: dict[Key, str] = {}
        self._sim_pids: dict[Key, int] = {}
        self._latest = LatestAttempts()
        self._reported = metricsfile.Kept()  # each task's last metrics report

    # ----- the node's setup -------------------------------------------------------------

    @property
    def data_dir(self) -> Path:
        return self.host.data_dir

    @property
    def as_root(self) -> bool:
        return self.host.as_root

    @property
    def step_bin(self) -> str:
        """Where srun/scontrol are (slurmbin.install); "" for none."""
        return self.host.step_bin

    @step_bin.setter
    def step_bin(self, path: str) -> None:
        self.host.step_bin = path

    @property
    def sharing(self) -> Sharing:
        return self.host.sharing

    @sharing.setter
    def sharing(self, sharing: Sharing) -> None:
        self.host.sharing = sharing

    @property
    def container_runtime(self) -> containers.Runtime | None:
        return self.containers.runtime

    @property
    def container_owner(self) -> str:
        """This agent's mark on its containers (OWNER_LABEL): the same after a restart."""
        return self.containers.owner

    # ----- queries ------------------------------------------------------------------------

    def live(self) -> list[Key]:
        return sorted(self._live)

    def checkpoints_now(self, now: float, ours: Container[Key]) -> list[RunnerEvent]:
        """The checkpoint of this attempt of each live rank 0 among ``ours``, its age counted
        now (``checkpoints.current``): a registration sends these in place of the reports
        queued while no controller listened, stale by the outage."""
        found = (checkpoints.current(t, now) for k, t in self._live.items() if k in ours)
        return [ev for ev in found if ev is not None]

    def evicting(self, ours: Container[Key]) -> list[TaskRef]:
        """The live ranks among ``ours`` being stopped for an eviction (a preemption's, a
        drain's deadline, the idle policy's: their notice may last minutes): a registration
        names them, for a controller that restarted meanwhile has forgotten the stop."""
        stops = ((k, t.stop_why) for k, t in self._live.items() if k in ours and t.stop_why)
        keys = [k for k, why in stops if why.split(";", 1)[0] in EVICTION_KILLS]
        return [TaskRef(job=j, attempt=a, rank=r) for j, a, r in keys]

    def report_metrics_again(self) -> None:
        """Each live task's metrics file is reported at its next look even if unchanged, and
        the last report of each task that ended here (the newest ``metricsfile.KEPT``) again:
        a controller that registers this agent anew (restarted, or a new leader) keeps job
        metrics in memory only (ADR 0049) and would otherwise wait for the file's next change."""
        for t in self._live.values():
            t.metrics_seen = None
        self._reported.replay(self._live)

    def gpu_load(self) -> dict[int, float]:
        """GPU → share held by live tasks (1.0 a whole GPU), for the simulated backend. A task
        whose environment sets GPUFLEET_SIM_GPU_LOAD (0 to 1) keeps its GPUs only that busy: a
        simulated workload that holds its GPUs and computes little (the idle-GPU policy's
        tests); real GPUs never read it."""
        load: dict[int, float] = {}
        for t in self._live.values():
            busy = _sim_load(t.env.get(SIM_LOAD_ENV))
            for g in t.gpus:
                load[g] = load.get(g, 0.0) + t.gpu_milli / 1000.0 * busy
        return load

    def gpu_uses(self) -> list[TaskUse]:
        """The live tasks holding GPUs as the simulated backend models them: each one's process
        group, GPUs, busy share (``gpu_load``'s) and whether it was given the video capability
        (``NVIDIA_DRIVER_CAPABILITIES``): it then runs an encoder session."""
        return [
            TaskUse(
                pid=pid,
                gpus=t.gpus,
                share=t.gpu_milli / 1000.0 * _sim_load(t.env.get(SIM_LOAD_ENV)),
                video="video" in t.env.get(CAPABILITIES_ENV, "").split(","),
            )
            for key, t in self._live.items()
            if t.gpus and (pid := self._sim_pid(key, t)) is not None
        ]

    def _container_id(self, key: Key, t: LiveTask) -> str:
        cid = self._cids.get(key, "")
        if not cid and t.container:
            cid = self._cids[key] = cgroups.container_id(cid_path(t.pidfile))
        return cid

    def _sim_pid(self, key: Key, t: LiveTask) -> int | None:
        """The process the simulated GPU says uses it: the task's own, or in a podman or
        docker container one of the container's (as on a real GPU, where the runtime's client
        uses none; None until the container has one)."""
        rt = self.containers.runtime
        if not t.container or rt is None or rt.NAME not in ("podman", "docker"):
            return t.proc.pid  # bare, or apptainer/enroot: in the task's process group
        if key not in self._sim_pids:
            cid = self._container_id(key, t)
            found = cgroups.a_process_in(cid) if cid else None
            if found is None:
                return None
            self._sim_pids[key] = found
        return self._sim_pids[key]

    def job_of_pid(self, pid: int) -> str | None:
        """The job whose task's process group ``pid`` is in (a task leads its own group; its
        ranks' children stay in it, as do apptainer's and enroot's containers), else whose
        podman or docker container's cgroup it is in; None for a process of no live task."""
        try:
            group = os.getpgid(pid)
        except OSError:  # gone, or not ours to see
            return None
        for (job, _, _), t in self._live.items():
            if t.proc.pid == group:
                return job
        for key, t in self._live.items():
            cid = self._container_id(key, t) if t.container else ""
            if cid and cgroups.within(pid, cid):
                return key[0]
        return None

    def probe_target(self, key: Key, host: str) -> ProbeTarget | None:
        """What a probe of live task ``key`` runs against (``host``: where it listens, the
        agent's address); None when it is not live. A command probe runs as the task was
        started: its account, its environment, its private /tmp, its working directory. In a
        container that would take the runtime's exec, which is not done yet: refused."""
        t = self._live.get(key)
        if t is None:
            return None
        if t.container or t.adopted:
            why = "command probes do not run in containers yet"
            if t.adopted:  # its account and environment are not kept on disk (secrets)
                why = "command probes stop when the agent restarts (the task runs on)"
            return ProbeTarget(host=host, env=dict(t.env), refuse_commands=why)
        return ProbeTarget(host=host, env=dict(t.env), account=t.account, tmp=t.tmp, cwd=t.cwd)

    def log_paths(self, key: Key) -> tuple[Path, Path]:
        return self.host.log_paths(key)

    def tmp_path(self, key: Key) -> Path:
        return self.host.tmp_path(key)

    # ----- launch -------------------------------------------------------------------------

    def launch(self, cmd: AgentCommand, now: float | None = None) -> list[RunnerEvent]:
        """Start one rank. Never raises: whatever stops a launch fails that task alone (exit
        125, the reason in its stderr log and its event) and the agent goes on."""
        now = self.clock.now() if now is None else now
        key: Key = (cmd.job, cmd.attempt, cmd.rank)
        if key in self._live:
            return []  # a redelivered launch
        refused = refusal(cmd, self._latest)
        if refused is not None:
            return [RunnerEvent("exited", key, EXIT_REFUSED, refused)]
        self._latest.put(cmd.job, cmd.attempt)
        try:
            ev, task = self._launcher.start(cmd, key, now)
        except Exception as e:
            if isinstance(e, LaunchRefused):
                why = str(e)
                log.warning("%s/%d rank %d: %s", *key, why)
            else:
                why = f"the agent could not start the task: {type(e).__name__}: {e}"
                log.exception("%s/%d rank %d: could not start", *key)
            note(self.host, key, why)
            sandbox.remove_tree(self.tmp_path(key))
            return [RunnerEvent("exited", key, EXIT_REFUSED, why)]
        if task is not None:
            self._live[key] = task
        return [ev]

    # ----- stop ---------------------------------------------------------------------------

    def kill(
        self,
        key: Key,
        grace_s: float,
        why: str,
        now: float | None = None,
        notice: StopNotice | None = None,
    ) -> bool:
        """SIGTERM to the task's group now, SIGKILL after ``grace_s``; with a ``notice``, its
        signal first and the SIGTERM once the checkpoint file is written or the notice's wait
        is over (``poll``). False if not running."""
        t = self._live.get(key)
        if t is None:
            return False
        now = self.clock.now() if now is None else now
        if supervise.stop(t, grace_s, why, now, notice, checkpoints.mtime(t.checkpoint)):
            self._kill_hard(t)
        elif t.notice_until is not None:
            self._save(t)  # a wait a restarted agent must finish
        return True

    def signal(self, key: Key, sig: int, scope: str) -> bool:
        """``sig`` to the task's processes that ``scope`` names (ADR 0078); it goes on
        running. False if it is not running, or is being stopped."""
        t = self._live.get(key)
        if t is None or t.stop_why is not None:
            return False
        whom = signal_scope(t, sig, scope)
        log.info("signal %d to %s/%d rank %d: %s", sig, *key, whom)
        return True

    def _save(self, t: LiveTask) -> None:
        """The task's pid file anew, with its stop under way (``adopt.record``)."""
        try:
            cleanup = self.containers.cleanup_argv(t.container)
            write_pidfile(t.pidfile, t.proc.pid, cleanup, adopt.record(t))
        except OSError as e:  # the wait goes on here; only a restart would lose it
            log.warning("%s/%d rank %d: could not record its stop: %s", *t.key, e)

    def _kill_hard(self, t: LiveTask) -> None:
        if supervise.kill_hard(t):
            self.containers.remove(t.container)

    # ----- poll ---------------------------------------------------------------------------

    def poll(self, now: float | None = None) -> list[RunnerEvent]:
        """Reap exited tasks and act on deadlines. Never blocks."""
        now = self.clock.now() if now is None else now
        out = self._reported.take()
        self.containers.reap_removals()
        for key, t in list(self._live.items()):
            rc = exit_status(t.proc)
            if rc is not None:
                del self._live[key]
                self._cids.pop(key, None)
                self._sim_pids.pop(key, None)
                with contextlib.suppress(OSError):
                    cid_path(t.pidfile).unlink()
                if t.metrics:  # what it wrote last, before its directory goes
                    out += self._reported.keep(metricsfile.look(t))
                if isinstance(t.proc, adopt.AdoptedProc) and t.proc.unknown:
                    t.stop_why = t.stop_why or "its keeper was killed: its exit status is lost"
                if t.container and (t.stop_why is not None or rc < 0):
                    self.containers.remove(t.container)  # its client was stopped: make sure
                out.append(exits.reaped(t, rc))
                continue
            supervise.warn_if_due(t, now)
            if t.metrics:
                out += self._reported.keep(metricsfile.look(t))
            if t.checkpoint:
                out += checkpoints.look(t, now)
            else:
                supervise.notice_due(t, now, None)
            if supervise.time_limit_passed(t, now):
                self.kill(key, t.grace_s, f"time limit ({t.time_limit_s:g} s) exceeded", now)
            if supervise.kill_due(t, now):
                self._kill_hard(t)
        return out

    def wait(self, timeout_s: float, step_s: float = 0.02) -> list[RunnerEvent]:
        """Poll until nothing is live or ``timeout_s`` of real time has passed."""
        end = time.monotonic() + timeout_s
        out = self.poll()
        while self._live and time.monotonic() < end:
            time.sleep(step_s)
            out += self.poll()
        return out

    # ----- after an agent restart ---------------------------------------------------------

    def adopt(
        self, *, rebooted: bool
    ) -> tuple[dict[Key, dict[str, dict[str, Any]]], list[RunnerEvent]]:
        """At startup, before any launch: the tasks a previous agent left that still run are
        ours to supervise now (their keys, each with its probes), and the exits of those that
        ended meanwhile are to be reported (ADR 0031). After a reboot only exits."""
        adopted, ended = adopt.collect(self.host, rebooted=rebooted)
        for key, t in adopted.items():
            self._live[key] = t
            self._latest.put(key[0], key[1])
        return {key: adopted[key].probes for key in sorted(adopted)}, ended

    def forget_exit(self, key: Key) -> None:
        """The controller has the task's exit: its keeper's record of it may go."""
        self.host.exit_path(key).unlink(missing_ok=True)

    def kill_orphans(self) -> list[Key]:
        """Kill the process groups a previous agent left running (their pid files remain):
        nobody supervises them, and the controller will run their jobs again elsewhere."""
        return exits.kill_orphans(self.host, self._live)

    def sweep_containers(self, timeout_s: float = 60.0) -> list[str]:
        """Remove gpufleet's containers that no live task of this agent runs (left by an agent
        that died, or by a client killed before its container); blocking, at startup."""
        return self.containers.sweep({t.container for t in self._live.values()}, timeout_s)


SIM_LOAD_ENV = "GPUFLEET_SIM_GPU_LOAD"
CAPABILITIES_ENV = "NVIDIA_DRIVER_CAPABILITIES"


def _sim_load(text: str | None) -> float:
    try:
        v = float(text) if text is not None else 1.0
    except ValueError:
        return 1.0
    return min(1.0, max(0.0, v)) if v == v else 1.0
