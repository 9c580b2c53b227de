"""A service as the store holds it (``Restored*``, given back at restart) and as the
ServiceMaster keeps it in memory (``Service``, ``Replica``), with the constants they share."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpufleet.core.commands import RouteBackend
from gpufleet.model.service import ServiceSpec

TIMER = "service"  # SetTimer/TimerFired kind; job_id carries the service's name
# a replica without a fixed port gets one of these, the lowest no other replica on its node
# holds: below the batch step daemons' (27500) and MASTER_PORT's (29500) ranges
REPLICA_PORT_BASE = 20000
REPLICA_PORT_SPAN = 7500
SUSPECT_PORT_S = 600.0  # how long a port a replica died on before it was ready is avoided
MAX_LOAD_SAMPLES = 4096


@dataclass(frozen=True, slots=True)
class RestoredReplica:
    job_id: str
    generation: int
    index: int
    port: int  # 0: none assigned (not started)
    created: float
    ready_since: float | None = None
    stopping: bool = False
    failed: str = ""  # why it was killed as failed (liveness), "" otherwise
    # moved make-before-break (a defragmentation move): the nodes it leaves, and since when
    moving: tuple[str, ...] = ()
    moving_since: float | None = None


@dataclass(frozen=True, slots=True)
class RestoredService:
    """A service as the store gives it back at restart (its replica jobs are ``RestoredJob``s
    as any job's). ``specs``: each generation still in use (the current one, the rollback
    target, and any a live replica has)."""

    specs: tuple[tuple[int, ServiceSpec], ...]
    generation: int
    desired: int
    replicas: tuple[RestoredReplica, ...] = ()
    previous: int | None = None  # the rollback target while a rollout runs
    rollout_since: float | None = None
    progress_at: float = 0.0
    rollout_failures: int = 0
    failures: int = 0  # failures in a row (the back-off's count)
    not_before: float = 0.0  # no replacement before
    node_failures: tuple[tuple[str, int], ...] = ()
    next_index: int = 1
    deleting: bool = False
    note: str = ""  # the last rollback, for people

    @property
    def name(self) -> str:
        return dict(self.specs)[self.generation].name


@dataclass(slots=True)
class Replica:
    job_id: str
    generation: int
    index: int
    created: float
    port: int = 0
    node: str = ""
    ready_since: float | None = None
    stopping: bool = False  # the service stops it: no failure
    failed: str = ""  # killed for failing liveness: a failure once it has ended
    # make-before-break (a defragmentation move, ADR 0045): the nodes it must leave and since
    # when; it serves on, not counted, until the replicas that replace it are ready (memory
    # only: a restarted controller forgets the move, and the surplus rule settles it)
    moving: tuple[str, ...] = ()
    moving_since: float | None = None

    @property
    def live(self) -> bool:
        return not self.stopping and not self.failed


@dataclass(slots=True)
class Service:
    specs: dict[int, ServiceSpec]
    generation: int
    desired: int
    replicas: dict[str, Replica] = field(default_factory=dict)
    previous: int | None = None
    rollout_since: float | None = None
    progress_at: float = 0.0
    rollout_failures: int = 0
    failures: int = 0
    not_before: float = 0.0
    node_failures: dict[str, int] = field(default_factory=dict)
    next_index: int = 1
    deleting: bool = False
    load: list[tuple[float, float]] = field(default_factory=list)
    note: str = ""
    routes: tuple[RouteBackend, ...] | None = None  # the last sent (None: never, since start)
    wakes: set[float] = field(default_factory=set)  # the timers set and not yet due
    # a desktop's last sign of use (a request or an open connection; its creation or resume
    # first): not stored, so a restarted controller counts the idle time again from its start
    active_at: float | None = None

    @property
    def spec(self) -> ServiceSpec:
        return self.specs[self.generation]

    @property
    def name(self) -> str:
        return self.spec.name

    def record(self) -> RestoredService:
        return RestoredService(
            tuple(sorted(self.specs.items())),
            self.generation,
            self.desired,
            tuple(
                RestoredReplica(
                    r.job_id,
                    r.generation,
                    r.index,
                    r.port,
                    r.created,
                    r.ready_since,
                    r.stopping,
                    r.failed,
                    r.moving,
                    r.moving_since,
                )
                for r in sorted(self.replicas.values(), key=lambda r: r.index)
            ),
            self.previous,
            self.rollout_since,
            self.progress_at,
            self.rollout_failures,
            self.failures,
            self.not_before,
            tuple(sorted(self.node_failures.items())),
            self.next_index,
            self.deleting,
            self.note,
        )


def template_changed(a: ServiceSpec, b: ServiceSpec) -> bool:
    return (a.replica, a.port, a.readiness, a.liveness) != (
        b.replica,
        b.port,
        b.readiness,
        b.liveness,
    )


def on_where(r: Replica) -> str:
    return f"{r.job_id} on {r.node}:{r.port}" if r.node else r.job_id


def surplus_order(replicas: list[Replica]) -> list[Replica]:
    """Which go first: not-ready ones, then the newest."""
    return sorted(replicas, key=lambda r: (r.ready_since is not None, -r.index))
