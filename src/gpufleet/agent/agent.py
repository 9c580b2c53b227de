"""The node agent: thin I/O shells around ``AgentState``.

Three threads talk to the controller — heartbeats (health, metrics, running tasks), the
command long-poll, and event/log shipping with retry — and the caller's thread ticks: it reaps
tasks, enforces deadlines and checks the lease. Each loop body is a ``*_once`` method, so a
test drives the agent step by step with an ``httpx.MockTransport`` and no threads. Every wait
is bounded, every HTTP call has a timeout; a network error is a failed step, never a crash."""

from __future__ import annotations

import logging
import random
import threading
import time

import httpx

from gpufleet.agent import containers, loops, sharing
from gpufleet.agent import state as st
from gpufleet.agent.config import AgentConfig
from gpufleet.agent.gpu import GpuBackend, metrics_payload, mixed_kinds_warning, node_gpu_model
from gpufleet.agent.heal import HealWorker
from gpufleet.agent.health import HealthChecker
from gpufleet.agent.host import host_metrics, host_resources
from gpufleet.agent.localfaults import with_local_faults
from gpufleet.agent.lookups import Lookups
from gpufleet.agent.nodecommand import KINDS, NodeCommands
from gpufleet.agent.probes.book import Probes
from gpufleet.agent.probes.executor import ProbeExecutor
from gpufleet.agent.probes.executor import tick as probe_tick
from gpufleet.agent.runner import TaskRunner
from gpufleet.agent.shipping import EventQueue, LogTail, LogTails, Stream
from gpufleet.agent.staleness import refused
from gpufleet.agent.state import (
    Action,
    AgentState,
    Kill,
    Launch,
    Register,
    Send,
    StartProbes,
    StopProbes,
)
from gpufleet.agent.tasks import EXIT_REFUSED, Key, RunnerEvent
from gpufleet.agent.watchdog import WatchdogHandle
from gpufleet.api.schemas import (
    AgentCommand,
    AgentEvent,
    AgentRegister,
    Health,
    Heartbeat,
    RegisterResult,
)
from gpufleet.base.clock import Clock, MonotonicClock
from gpufleet.client.errors import ApiError
from gpufleet.client.http import AgentClient

log = logging.getLogger(__name__)

_EVENT_BATCH = 200
_CHUNKS_PER_ROUND = 64  # per shipping round, so one chatty task cannot starve the others
# 4xx answers that a retry may fix: auth (an admin can fix the token), not registered yet,
# timeouts and rate limits. Any other 4xx refuses that body for good: resending cannot help.
_RETRYABLE = (401, 403, 408, 409, 429)
_RETRYABLE_LOGS = (401, 408, 409, 429)  # a 403 for logs: that rank is not ours (any more)


def _refused(e: ApiError, retryable: tuple[int, ...]) -> bool:
    return 400 <= e.status < 500 and e.status not in retryable


class Agent:
    def __init__(
        self,
        client: AgentClient,
        backend: GpuBackend,
        config: AgentConfig,
        *,
        clock: Clock | None = None,
        runner: TaskRunner | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.client = client
        # the retry waits' jitter (backoff.py): agents cut off together come back apart
        self._rng = rng or random.Random()
        self.backend = backend
        self.config = config
        self.clock = clock or MonotonicClock()
        self.state = AgentState(fence_grace_s=config.fence_grace_s)
        self.runner = runner or TaskRunner(
            config.data_dir,
            backend.visible_devices,
            self.clock,
            config.task_env,
            container_runtime=containers.choose(config.container_runtime),
            device_refs=getattr(backend, "device_refs", None),
        )
        self.gpus = backend.discover()
        if (mixed := mixed_kinds_warning(self.gpus)) is not None:
            log.warning("%s", mixed)
        self.health = HealthChecker(self.gpus, config.limits, config.expected_gpus)
        self.last_health = Health()
        self.events = EventQueue(config.max_events)
        # replicas' probes: the book under _lock, run on the agent's clock by a pool of theirs
        self.probes = Probes()
        self.probe_executor = ProbeExecutor(self.clock)
        self.healer = HealWorker(self)  # the heal loop's steps (ADR 0042)
        self.logs = LogTails()
        self.node_commands = NodeCommands(config.data_dir)
        self.lookups = Lookups()  # the controller's questions about users' accounts
        self.heartbeat_s = config.heartbeat_s
        self._lock = threading.RLock()  # state + runner; never held across HTTP
        self._gpu_lock = threading.Lock()  # backends need not be thread-safe
        self._mps = sharing.DaemonWatch()  # asks the MPS control daemon, now and then
        self._stop = threading.Event()
        self._closing = False  # stop() began: commands that arrive now are not acted on
        self._wake_ship = threading.Event()
        # the commands' poll found the controller gone or another leading: heartbeat now
        self._wake_heartbeat = threading.Event()
        self._wake_tick = threading.Event()  # a command acted on: an idle tick loop wakes
        self._threads: list[threading.Thread] = []
        self._failing: set[str] = set()  # what is failing now (logged once, not every retry)
        # the node's fencing watchdog (run_agent starts it): it reads the lease we publish
        self.watchdog: WatchdogHandle | None = None
        # the newest registration's number: a launch sent under an older one is stale (a
        # long-poll answered before we were declared lost, read only after we woke up)
        self.epoch = 0
        # the highest leader's epoch seen (controllers in high availability, ADR 0032): a
        # command of a lower one comes from a deposed leader and is refused, a kill as well
        self.term = 0
        self._registering = 0  # registrations in flight (their list of tasks is made)

    def _failed(self, what: str, e: Exception) -> None:
        level = logging.DEBUG if what in self._failing else logging.WARNING
        self._failing.add(what)
        log.log(level, "%s failed: %s", what, e)

    def _ok(self, what: str) -> None:
        if what in self._failing:
            self._failing.discard(what)
            log.info("%s works again", what)

    # ----- actions ------------------------------------------------------------------------

    def _do(self, actions: list[Action]) -> None:
        """Carry out the state's actions (the caller holds the lock)."""
        if actions:
            self._wake_tick.set()
        for a in actions:
            if isinstance(a, Launch):
                self._feed(self._launch(a.cmd))
            elif isinstance(a, Kill):
                log.warning("stopping %s/%d rank %d: %s", *a.key, a.why)
                self.runner.kill(a.key, a.grace_s, a.why, self.clock.now(), a.notice)
            elif isinstance(a, st.Signal):  # a signal the task lives through (ADR 0078)
                self.runner.signal(a.key, a.signal, a.scope)
            elif isinstance(a, Send):
                self.events.put(a.event)
                self._wake_ship.set()
            elif isinstance(a, Register):
                log.warning("registering again: %s", a.why)
            elif isinstance(a, StartProbes):
                # probed where the gateway reaches it: the address this agent registered
                target = self.runner.probe_target(a.key, self.config.address)
                if target is not None:
                    self.probes.add(a.key, a.probes, target, self.clock.now())
            elif isinstance(a, StopProbes):
                self.probes.remove(a.key)

    def _launch(self, cmd: AgentCommand) -> list[RunnerEvent]:
        """The runner's launch; should it ever raise, that task fails, not the thread that
        carried the command (every later launch on this node would wait forever)."""
        try:
            return self.runner.launch(cmd, self.clock.now())
        except Exception as e:
            log.exception("launching %s/%d rank %d failed", cmd.job, cmd.attempt, cmd.rank)
            why = f"the agent could not start the task: {type(e).__name__}: {e}"
            key: Key = (cmd.job, cmd.attempt, cmd.rank)
            return [RunnerEvent("exited", key, EXIT_REFUSED, why)]

    def _feed(self, evs: list[RunnerEvent]) -> None:
        for ev in evs:
            if ev.kind in ("checkpoint", "metrics"):  # no log to follow: only a report
                self._do(self.state.on_task(ev))
                continue
            out, err = self.runner.log_paths(key := ev.key)
            if ev.kind == "started" or (err.exists() and not self.logs.tracked(key)):
                self.logs.track(key, out, err, resume=ev.kind == "exited")
            self._do(self.state.on_task(ev))
            if ev.kind == "exited":
                # only once its exit is queued: the shipper (another thread, events before
                # logs) then never sends the log's last chunk ahead of the exit
                self.logs.complete(key)

    def adopt(self, *, rebooted: bool, fence_until: float) -> list[Key]:
        """At start: a previous agent's tasks that still run are ours (their logs shipped on
        from where it had got to), the exits of those that ended meanwhile queued (ADR 0031)."""
        with self._lock:
            tasks, ended = self.runner.adopt(rebooted=rebooted)
            for key in tasks:
                self.logs.track(key, *self.runner.log_paths(key), resume=True)
            self._do(self.state.adopt(tasks, fence_until))
            self._feed(ended)
        return sorted(tasks)

    def _delivered(self, events: list[AgentEvent]) -> None:
        """The controller has these: the keepers' records of those exits may go."""
        for e in events:
            if e.kind == "exited":
                self.runner.forget_exit((e.job, e.attempt, e.rank))

    def _publish_lease(self) -> None:
        """After a renewal (the caller holds the lock): the watchdog fences on this deadline,
        the outage tolerance's end (the lease's only stops launches, in the state)."""
        if self.watchdog is not None:
            self.watchdog.renew(self.state.fence_until, self.state.fence_grace_s)

    # ----- one step of each loop ----------------------------------------------------------

    def tick_once(self) -> None:
        now = self.clock.now()
        if self.watchdog is not None:
            self.watchdog.ensure()
        with self._lock:
            self._feed(self.runner.poll(now))
            self._do(self.state.on_tick(now))
            self._do(self.state.on_probes(probe_tick(self.probes, self.probe_executor, now)))
            load = self.healer.load(self.runner.gpu_load())
            uses = self.runner.gpu_uses()
        with self._gpu_lock:
            self.backend.set_load(load, now, uses)
        if said := self._mps.check(self.runner.sharing, now):
            log.warning("%s", said)

    def _job_of_pid(self, pid: int) -> str | None:
        with self._lock:
            return self.runner.job_of_pid(pid)

    def register_once(self) -> bool:
        now = self.clock.now()
        if self.backend.frozen(now):
            return False
        with self._lock:
            self._registering += 1  # launches from here on are not in the list we send
        done = False
        try:
            res = self._register(now)
            if res is None:
                return False
            with self._lock:  # one section: no launch of this epoch is dropped after it
                self._registering -= 1
                done = True
                if res.term > self.term:  # a new leader: its registrations count afresh
                    self.term, self.epoch = res.term, res.epoch
                self.epoch = max(self.epoch, res.epoch)
                if res.fence_grace_s is not None:  # the controller counts on this one
                    self.state.fence_grace_s = min(self.config.fence_grace_s, res.fence_grace_s)
                # the controller gives the node up only after this (and the grace): no longer
                self.state.outage_tolerance_s = res.outage_tolerance_s or 0.0
                self._do(self.state.on_registered(res.lease_s, now))
                self._publish_lease()
                self.runner.report_metrics_again()  # a new controller's memory lacks them
        finally:
            if not done:
                with self._lock:
                    self._registering -= 1
        if res.heartbeat_s > 0:
            self.heartbeat_s = min(self.config.heartbeat_s, res.heartbeat_s)
        node, lease = self.config.node, res.lease_s
        log.info("registered %s: lease %.1f s, heartbeat %.1f s", node, lease, self.heartbeat_s)
        return True

    def _register(self, now: float) -> RegisterResult | None:
        with self._gpu_lock:
            gpus = self.backend.discover()
            driver, cuda = self.backend.driver_version(), self.backend.cuda_version()
        cores, mem = host_resources()
        c = self.config
        with self._lock:
            running, ended = self.state.running(), self.state.ended()
            fresh = [e.wire() for e in self.runner.checkpoints_now(now, self.state.tasks)]
            stopping = self.runner.evicting(self.state.tasks)
        unacked = self.events.peek(self.config.max_events)
        req = AgentRegister(
            node=c.node,
            address=c.address,
            gpu_model=node_gpu_model(gpus),
            gpus=gpus,
            cpu_cores=c.cpu_cores if c.cpu_cores is not None else cores,
            memory_gib=c.memory_gib if c.memory_gib is not None else mem,
            leaf=c.leaf,
            pod=c.pod,
            labels=dict(c.labels),
            features=list(c.features),
            gres_type=c.gres_type,
            driver_version=driver,
            cuda_version=cuda,
            container_runtimes=[rt.NAME] if (rt := self.runner.container_runtime) else [],
            running=running,
            events=[*(e for e in unacked if e.kind != "checkpoint"), *fresh],
            ended=ended,
            stopping=stopping,
            runs_as_owner=self.runner.as_root,
        )
        try:
            res = self.client.register(req)
        except (httpx.HTTPError, ApiError) as e:
            self._failed("register", e)
            return None
        self.events.ack(unacked)  # delivered with the registration
        self._delivered(unacked)
        self._ok("register")
        return res

    def heartbeat_once(self) -> bool:
        """One heartbeat (registering first when needed); False when it did not get through."""
        if not self.state.registered:
            return self.register_once()
        now = self.clock.now()
        if self.backend.frozen(now):
            return False  # a hung node says nothing; the lease runs out as it would
        with self._gpu_lock:
            samples = self.backend.sample(now)
        # the node's own faults (a full data disk) drain it but spare its running tasks
        lease_fault = self.watchdog.fault if self.watchdog is not None else ""
        gpus = self.health.check(samples)
        self.last_health = with_local_faults(gpus, self.config.data_dir, lease_fault)
        metrics = metrics_payload(
            samples,
            self.health.last_xid,
            host_metrics(self.config.data_dir),
            self._job_of_pid,
        )
        with self._lock:
            hb = Heartbeat(health=self.last_health, metrics=metrics, running=self.state.running())
        try:
            res = self.client.heartbeat(self.config.node, hb)
        except ApiError as e:
            self._failed("heartbeat", e)
            with self._lock:
                self._do(self.state.on_heartbeat_failed(self.clock.now(), e.status))
            return self.register_once() if not self.state.registered else False
        except httpx.HTTPError as e:
            self._failed("heartbeat", e)
            with self._lock:
                self._do(self.state.on_heartbeat_failed(self.clock.now()))
            return False
        self._ok("heartbeat")
        with self._lock:
            self._do(self.state.on_heartbeat_ok(res, now))
            self._publish_lease()
        if res.register_again:
            log.warning("registering again: the controller rebuilt its state from the store")
            self.register_once()  # a failure is retried at the next heartbeat's request
        return True

    def _refused(self, cmd: AgentCommand) -> bool:
        return refused(cmd, self.term, self.epoch, self._registering)

    def commands_once(self, wait_s: float | None = None) -> int:
        """One long-poll; the number of commands it brought. Raises on a network error."""
        if not self.state.registered or self.backend.frozen(self.clock.now()):
            return 0
        wait = self.config.poll_wait_s if wait_s is None else wait_s
        cmds = self.client.commands(self.config.node, wait_s=wait)
        if self.backend.frozen(self.clock.now()):
            return 0  # a hung node does not act on what reached it
        cmds = self.lookups.answer(self.client, self.config.node, cmds)  # "accounts" ones
        with self._lock:
            if self._closing:  # not acknowledged: the controller hands it out again
                return 0
            cmds = [c for c in cmds if not self._refused(c)]
            for cmd in cmds:
                if cmd.kind in KINDS:  # an operator's command: not a task of the state's
                    self.node_commands.take(cmd)
                elif cmd.kind == "heal":  # a step of the heal loop (ADR 0042)
                    self.healer.order(cmd)
                else:
                    self._do(self.state.on_command(cmd, self.clock.now()))
        return len(cmds)

    def ship_once(self) -> bool:
        """Send queued events, then new log bytes. True when everything went out."""
        if self.backend.frozen(self.clock.now()):
            return False
        finals = self.logs.completed()  # their exits are queued already (_feed): they go first
        # but an exited task's bytes go before its exit, as slurmstepd flushes a step's output
        # before it reports the end: a job seen ended has its log (the final mark comes after)
        done = [t for t in self.logs.pending() if t.id in finals]
        if self._ship_logs(done, set())[0] is False:
            return False
        while batch := self.events.peek(_EVENT_BATCH):
            try:
                self.client.events(self.config.node, batch)
            except ApiError as e:
                if not _refused(e, _RETRYABLE):
                    self._failed("events", e)
                    return False
                log.error("controller refused %d events for good: %s", len(batch), e)
            except httpx.HTTPError as e:
                self._failed("events", e)
                return False
            self.events.ack(batch)
            self._delivered(batch)
            self._ok("events")
        try:  # operators' commands' results, each until the controller has it
            self.node_commands.ship(self.client, self.config.node, _RETRYABLE)
        except (ApiError, httpx.HTTPError) as e:
            self._failed("command results", e)
            return False
        ok, sent = self._ship_logs(self.logs.pending(), finals)
        return ok and sent < _CHUNKS_PER_ROUND

    def _ship_logs(self, tails: list[LogTail], finals: set[tuple[Key, Stream]]) -> tuple[bool, int]:
        """Send up to a round's chunks of ``tails``, the final mark only of ``finals``';
        (False, n) on a network error."""
        sent = 0
        for tail in tails:
            while sent < _CHUNKS_PER_ROUND and (nxt := tail.next_chunk(final_ok=tail.id in finals)):
                chunk, raw_len = nxt
                try:
                    self.client.logs(self.config.node, chunk)
                except ApiError as e:
                    if not _refused(e, _RETRYABLE_LOGS):
                        self._failed("logs", e)
                        return False, sent
                    log.error("controller refused the logs of %s for good: %s", tail.key, e)
                    self.logs.drop(tail)
                    break
                except httpx.HTTPError as e:
                    self._failed("logs", e)
                    return False, sent
                tail.ack(chunk, raw_len)
                self._ok("logs")
                sent += 1
            if tail.final_sent:
                self.logs.drop(tail)
        return True, sent

    # ----- threads ------------------------------------------------------------------------

    def start(self) -> None:
        """Start the three I/O threads; the caller then ticks (``run``) on its own thread."""
        for name, loop in (
            ("heartbeat", loops.heartbeat),
            ("commands", loops.commands),
            ("shipping", loops.shipping),
        ):
            t = threading.Thread(target=loop, args=(self,), name=f"agent-{name}", daemon=True)
            t.start()
            self._threads.append(t)

    def run(self, stop: threading.Event, until: float | None = None) -> None:
        """Tick until ``stop`` is set (or ``until`` on the agent's clock): ``loops.ticks``."""
        loops.ticks(self, stop, until)

    def idle(self) -> bool:
        """Nothing here for a tick to watch: no task (nor its probes), no heal step."""
        with self._lock:
            return not self.runner.live() and not len(self.probes) and self.healer.idle()

    def _crashed(self, what: str, e: Exception) -> None:
        """An unexpected exception in a loop: logged (with its traceback the first time) and
        survived, so that no thread of the agent ever dies of one."""
        if what in self._failing:
            log.debug("%s failed again: %s", what, e)
        else:
            self._failing.add(what)
            log.exception("%s failed unexpectedly; retrying", what)

    def stop(self, *, kill_tasks: bool = True, grace_s: float = 5.0, flush_s: float = 5.0) -> None:
        """Stop the tasks (SIGTERM, grace, SIGKILL), try to deliver what is queued, then stop
        the threads. Bounded by about ``grace_s + flush_s`` seconds of real time."""
        with self._lock:  # from now on, what a long-poll in flight brings is dropped
            self._closing = True
        if kill_tasks:
            with self._lock:
                for key in self.runner.live():
                    self.runner.kill(key, grace_s, "the agent is shutting down")
            end = time.monotonic() + grace_s + 1.0
            while self.runner.live() and time.monotonic() < end:
                self.tick_once()
                time.sleep(0.02)
            self.tick_once()
        end = time.monotonic() + flush_s
        while time.monotonic() < end and not self.backend.frozen(self.clock.now()):
            if self.ship_once() and not len(self.events) and not self.logs.pending():
                break
            time.sleep(0.1)
        self._stop.set()
        self._wake_ship.set()
        self._wake_heartbeat.set()
        for t in self._threads:
            if t.name != "agent-commands":  # it may wait in a long-poll that brings nothing kept
                t.join(timeout=1.0)
        self.probe_executor.shutdown(wait=False)  # a probe in flight ends at its timeout
        self.healer.close()
        with self._gpu_lock:
            self.backend.close()
        self.client.close()
