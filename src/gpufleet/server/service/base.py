"""What every step of the controller service shares: its settings, the core and its driver,
the agents' links and outboxes, the inbox. Each step (``loop``, ``intake``, ``recovery``,
``agents``, ``requests``, ``services``) is a class on top of this one; ``ControllerService``
(``controller.py``) is all of them."""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import Any

from gpufleet.base.clock import Clock
from gpufleet.core.commands import HealOrder, NodeEvent, Transition
from gpufleet.core.controller import Controller
from gpufleet.core.driver import Driver, PassRule, Step
from gpufleet.core.events import Event
from gpufleet.core.executor import Executor
from gpufleet.core.liveness import NodeLiveness
from gpufleet.model.cluster import ClusterSpec
from gpufleet.model.heal import HealPolicy
from gpufleet.scheduler.framework import Profile
from gpufleet.server.agent_executor import AgentExecutor
from gpufleet.server.config import check_fencing, fencing_timings
from gpufleet.server.elastic.executor import WithPower, power_pool
from gpufleet.server.elastic.providers import PowerProvider
from gpufleet.server.gateway_executor import ServiceGateway, WithGateway
from gpufleet.server.jobmetrics import JobMetricsBook
from gpufleet.server.journal import AuditRow, StoreJournal
from gpufleet.server.logs import LogStore
from gpufleet.server.outbox import Outbox
from gpufleet.server.reads import ClusterReads
from gpufleet.server.service.identity_book import AccountBook
from gpufleet.server.service.links import NodeLink
from gpufleet.server.service.store import Store
from gpufleet.server.service.store_down import StoreDown
from gpufleet.server.service.work import Work
from gpufleet.server.stepenv import JobPorts
from gpufleet.server.store.bodies import Bodies

log = logging.getLogger("gpufleet.controller")

# After a scheduling pass, a mere change waits this long (Clock seconds) for the next one: a
# burst of submissions is scheduled a few times a second, not once per turn, so that passes
# over thousands of pending jobs do not starve the turns that accept them (BENCHMARKS.md,
# "Live cluster"). The rule is the driver's (``PassRule``), on the Clock, so the simulator
# (``SimConfig.min_pass_gap_s``) schedules at the same moments. The interval's tick always
# schedules; an idle cluster's first change is scheduled at once.
MIN_PASS_GAP_S = 0.1


class ServiceBase(ClusterReads, ABC):
    """The read methods the routers call are ``ClusterReads``'s (reads.py)."""

    def __init__(
        self,
        store: Store,
        profile: Profile,
        clock: Clock,
        *,
        cluster: ClusterSpec | None = None,
        logs: LogStore,
        heartbeat_s: float = 5.0,
        lease_s: float = 7.5,
        fence_grace_s: float = 2.0,
        node_grace_s: float = 10.0,
        outage_tolerance_s: float = 0.0,  # 0: as long as the node grace allows
        launch_timeout_s: float = 120.0,
        schedule_interval_s: float = 5.0,
        grace_kill_s: float = 10.0,
        batch_max: int = 500,
        retry_backoff_s: float = 10.0,
        retry_backoff_max_s: float = 600.0,
        monotonic: Callable[[], float] = time.monotonic,
        fallback_account: str = "",
        step_secret: bytes = b"",
        desktop_secret: bytes = b"",
        min_pass_gap_s: float = MIN_PASS_GAP_S,
        gateway: ServiceGateway | None = None,
        queues_declared: bool | None = None,
        heal: HealPolicy | None = None,
        power: Mapping[str, PowerProvider] | None = None,
        replica_ports: range | None = None,
        job_ports: JobPorts | None = None,
    ) -> None:
        node_grace_s, outage_tolerance_s = fencing_timings(
            lease_s, fence_grace_s, node_grace_s, outage_tolerance_s
        )
        check_fencing(heartbeat_s, lease_s, fence_grace_s, node_grace_s, outage_tolerance_s)
        self.store = store
        self.fallback_account = fallback_account
        # the users whose accounts the nodes are asked about (service/identity.py); none are
        # with a fallback account, which runs every such job
        self.identity = AccountBook(enabled=not fallback_account)
        self._init_keys(step_secret, desktop_secret)
        self.clock = clock
        self._profile = profile
        self._backoff = (retry_backoff_s, retry_backoff_max_s)
        self._launch_timeout_s = launch_timeout_s
        self._heal = heal  # the heal loop's policy (ADR 0042); None: no heal loop
        self._replica_ports, self._job_ports = replica_ports, job_ports  # None: the defaults
        self._cluster_queues = list(cluster.queues) if cluster is not None else []
        # the elastic pools (core/elastic/) and their providers (server/elastic/)
        self._elastic = cluster.elastic if cluster is not None else ()
        self.power = dict(power or {})
        self._power_pool = power_pool() if self.power else None
        # what a submission is judged against: every node, an elastic pool's max of them too
        self._cluster_nodes = (
            (*cluster.nodes, *(n for p in cluster.elastic for n in p.nodes)) if cluster else ()
        )
        self._fit_cache = None  # reads._configured_nodes
        # whether the cluster's files declare its queues (None: its cluster spec alone says);
        # a cluster declaring none has exactly one, ``default`` (admission.valid_queues)
        self.queues_declared = (
            bool(self._cluster_queues) if queues_declared is None else queues_declared
        )
        self._rule = PassRule(min_gap_s=min_pass_gap_s, tick_s=schedule_interval_s)
        # set while the store is down: what failed, and the back-off of the rebuild
        self.down = StoreDown()
        self.logs = logs
        self.outbox = Outbox()
        self.links: dict[str, NodeLink] = {}
        # the services' endpoints (gateway_executor.py); None: services get no data path
        self.gateway = gateway
        if gateway is not None:
            self._wire(gateway)
        self.heartbeat_s = heartbeat_s
        self.lease_s = lease_s
        self.fence_grace_s = fence_grace_s
        self.node_grace_s = node_grace_s
        self.outage_tolerance_s = outage_tolerance_s  # sent to agents at registration
        self.schedule_interval_s = schedule_interval_s
        self.grace_kill_s, self.batch_max = grace_kill_s, batch_max
        self._init_turns(monotonic, node_grace_s)

    def _wire(self, gateway: ServiceGateway) -> None:
        """What the gateway asks of this service: the nodes' addresses, a desktop's viewers
        and its replicas' keys."""
        gateway.links, gateway.viewers = self.links, self.desktop_viewers
        gateway.keys = self.desktop_key

    def _init_keys(self, step_secret: bytes, desktop_secret: bytes) -> None:
        """srun's step keys; desktop replicas' keys (stepenv.desktop_key: from the secrets
        key, which the controllers share). Process-lifetime ones when none is given (tests)."""
        self.step_secret = step_secret or secrets.token_bytes(32)
        self.desktop_secret = desktop_secret or secrets.token_bytes(32)

    def desktop_viewers(self, name: str) -> tuple[str, ...]:
        """Who may open a desktop service's endpoint (services.py says)."""
        return ()

    def desktop_key(self, name: str, job_id: str) -> str:
        """A desktop replica's key (services.py says)."""
        return ""

    def _init_turns(self, monotonic: Callable[[], float], node_grace_s: float) -> None:
        """The turn loop's state, the liveness timers and the core they drive."""
        self._sampler: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # the gateway's thread comes back
        self._last_epoch = 0
        self._inbox: list[Work] = []
        self._current: list[Work] = []
        # ids stored and answered in this turn that the core does not hold yet (between a
        # turn's acceptance and its step), and the event set once it does
        self._unheld: set[str] = set()
        self._held = asyncio.Event()
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        # leases are timed on this clock, which NTP does not step (a test gives its own); the
        # timers are the core's, kept across rebuilds like the links they time
        self._monotonic = monotonic
        self.liveness = NodeLiveness(node_grace_s)
        self.ctrl = self._new_controller()
        self.driver = self._new_driver(self.ctrl)
        self._history = False  # the store held jobs when we started (intake's idempotency)
        # the newest job stored before this process started: the jobs up to it that had
        # finished are in the store only (a restart loads the unfinished ones)
        self.restored_seq = 0
        # the jobs' bodies a standby read ahead (ADR 0059): its takeover's read-back uses them
        self.bodies: Bodies | None = None
        self.turns = 0
        self.on_turn: Callable[[], None] | None = None  # tests: observe a finished turn
        # the metrics exporter: what each turn committed (after it was sent)
        self.on_commit: Callable[[float, list[Transition], list[NodeEvent]], None] | None = None
        # the dashboard: each heartbeat's metrics (node, time, body), for its history charts
        self.on_heartbeat: Callable[[str, float, dict[str, Any]], None] | None = None
        self.job_metrics = JobMetricsBook()  # each job's own, as its agent reported them

    def _new_controller(self) -> Controller:
        ctrl = Controller(
            self._profile,
            None,
            backoff_base_s=self._backoff[0],
            backoff_max_s=self._backoff[1],
            launch_timeout_s=self._launch_timeout_s,
            heal=self._heal,
            elastic=self._elastic,
            replica_ports=self._replica_ports,
        )
        ctrl.queues = {q.name: q for q in self._cluster_queues}
        return ctrl

    def _site_remedy(self, order: HealOrder) -> None:
        """The heal loop's site remedy (``healremedy.py`` runs it as a node command)."""

    def _node_command_later(
        self, node: str, kind: str, command: str, timeout_s: float, why: str
    ) -> None:
        """A node command the core's step asked for, started off it (``healremedy.py``)."""

    def _new_driver(self, ctrl: Controller) -> Driver:
        """The core's driver: the store its journal, the agents' outboxes its executor, the
        service's liveness timers its node-loss timing."""
        executor: Executor = AgentExecutor(
            ctrl,
            self.outbox,
            self.links,
            grace_kill_s=self.grace_kill_s,
            fallback_account=self.fallback_account,
            step_secret=self.step_secret,
            desktop_secret=self.desktop_secret,
            job_ports=self._job_ports,
            site_remedy=self._site_remedy,
            node_command=self._node_command_later,
        )
        journal = StoreJournal(self.store, ctrl, self._audits_of, self.down.committed)
        start = self.clock.now()
        if self._power_pool is not None:
            executor = WithPower(executor, self.power, self.post, self._on_loop, self._power_pool)
        if self.gateway is None:
            return Driver(ctrl, executor, journal, self._rule, start=start, liveness=self.liveness)
        routed = WithGateway(executor, self.gateway, _call_later, self._on_loop)
        return Driver(ctrl, routed, journal, self._rule, start=start, liveness=self.liveness)

    def _install(self, ctrl: Controller) -> None:
        """``ctrl`` from now on, with a driver of its own: a restart's (or a failed turn's)
        timers are gone with the old one; the restored state implies them."""
        self.ctrl = ctrl
        self.driver = self._new_driver(ctrl)

    @abstractmethod
    def post(self, ev: Event) -> None:
        """Handled at the next turn (``Requests.post``)."""

    def close_power(self) -> None:
        """The providers' asks under way finished, and their own ends (the ``local``
        provider stops the agents it started). Off the loop: it waits."""
        if self._power_pool is not None:
            self._power_pool.shutdown(wait=True)
        for p in self.power.values():
            p.close()

    def lease_now(self) -> float:
        """Now on the clock leases are timed on (monotonic: NTP does not step it)."""
        return self._monotonic()

    def _renew(self, node: str) -> None:
        """The node's agent was answered now: its lease runs from here."""
        self.liveness.renewed(node, self.lease_now())

    def _audits_of(self, step: Step) -> list[AuditRow]:
        """The audit entries of this turn's requests that the core did not refuse."""
        refused = {id(ev) for ev, _ in step.refused}
        return [
            w.audit_row
            for w in self._current
            if w.audit_row is not None and w.kind == "event" and id(w.payload) not in refused
        ]

    def _release_unheld(self) -> None:
        if self._unheld:
            self._unheld.clear()
            self._held.set()
            self._held = asyncio.Event()

    def _on_loop(self, fn: Callable[[], None]) -> None:
        """``fn`` on the controller's loop, from the gateway's thread (an apply is done)."""
        loop = self._loop
        if loop is None:
            log.error("the gateway finished an apply before the controller started")
            return
        try:
            loop.call_soon_threadsafe(fn)
        except RuntimeError:  # the loop is closed: the server has stopped
            log.warning("the gateway finished an apply after the controller stopped")


def _call_later(delay_s: float, fn: Callable[[], None]) -> object:
    """``fn`` on the controller's loop ``delay_s`` from now (a drained replica's Kill)."""
    return asyncio.get_running_loop().call_later(delay_s, fn)
