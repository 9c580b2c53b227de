"""The scheduling framework: named extension points, a status per plugin call, the registry.

Like the Kubernetes scheduling framework, each step of the cycle is an extension point with a
small protocol whose calls answer a ``Status`` (admit: an ``Admission``, place: a ``Choice``,
backfill: a ``Status``, preempt: ``Victims``); a plugin is one module with a ``NAME``
(``"place/fgd"``) and a ``Plugin`` class that takes its options as keyword arguments and
derives from its point's base in ``plugins.base`` (which answers the optional members: the
cycle reads them directly, it never probes). A profile names one plugin (or several, for
``preempt``) per point; an unknown name or option, or a plugin that lacks a member of its
point's protocol, fails when the profile is built, not mid-cycle.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from random import Random
from typing import Any, NamedTuple, Protocol, runtime_checkable

from gpufleet.model.job import JobSpec
from gpufleet.model.reason import Reason
from gpufleet.scheduler.request import WorkerRequest
from gpufleet.scheduler.snapshot import PendingJob, RunningJob, ServiceMark, Snapshot
from gpufleet.scheduler.usage import QueueUsage
from gpufleet.scheduler.workspace import Domain, Workspace


class Code(StrEnum):
    """The outcome of one plugin call (after the Kubernetes framework's status codes)."""

    SUCCESS = "Success"
    UNSCHEDULABLE = "Unschedulable"  # not now; may fit later or after preemption
    UNRESOLVABLE = "UnschedulableAndUnresolvable"  # never, whatever is freed
    WAIT = "Wait"  # an outside condition (back-off, dependency)


@dataclass(frozen=True, slots=True)
class Status:
    code: Code
    reason: Reason | None = None

    @property
    def ok(self) -> bool:
        return self.code is Code.SUCCESS


SUCCESS = Status(Code.SUCCESS)


@runtime_checkable
class OrderPlugin(Protocol):
    """Step 1: the order in which pending jobs are considered.

    ``order`` may be lazy and may read ``usage``, which the cycle updates as it admits jobs, so
    that fair share sees the jobs admitted earlier in the same cycle. ``half_life_s``: the
    half-life with which the core decays each queue's past usage for this order (fair share
    reads it). Plugins derive from ``plugins.base.OrderBase``, which answers the optional
    members."""

    half_life_s: float

    def order(
        self, pending: Sequence[PendingJob], snap: Snapshot, usage: QueueUsage
    ) -> Iterator[PendingJob]: ...

    def outranks(self, job: PendingJob, victim: RunningJob, snap: Snapshot) -> bool:
        """Whether ``job`` may preempt ``victim`` by this order's own rule (LAS: lower
        attained service). Orders without such a rule answer False."""
        ...

    def outrank_key(self, job: PendingJob, snap: Snapshot) -> Hashable | None:
        """In one snapshot, jobs of equal keys outrank the same running jobs (``preempt/order``
        then works their victims out once per key); None: no such promise."""
        ...

    def outranked(self, job: PendingJob, snap: Snapshot) -> Iterable[RunningJob]:
        """The running jobs ``job`` outranks, in ``snap.running``'s order (an order may find
        them faster than by asking ``outranks`` of each)."""
        ...

    def started(self, job: PendingJob, now: float) -> ServiceMark:
        """The job's mark for the attempt it starts now (the core keeps it until the next start;
        LAS resets it where its starvation rule promoted the job). The plain answer carries the
        wait over: ``job.mark`` with the wait since its last stop added."""
        ...

    def finished(self, spec: JobSpec, service_gpu_s: float) -> None:
        """A job of ``spec`` ended (for good) after ``service_gpu_s`` of service: what an
        order that learns from history (LAS' ``within: history``) learns from; others ignore
        it."""
        ...


@dataclass(frozen=True, slots=True)
class Admission:
    status: Status
    borrowing: bool = False  # admitted only by borrowing idle quota in the cohort
    within_nominal: bool = False  # fits the queue's own quota (may reclaim lent quota)


ADMITTED = Admission(SUCCESS, within_nominal=True)  # immutable: one for every such answer


@runtime_checkable
class AdmitPlugin(Protocol):
    """Step 2: may this job start in its queue, by quota (and borrowing)?

    ``admits_unlimited`` says the plugin answers ``ADMITTED`` for every job whose queue has no
    quota (``QueueUsage.limited``), whatever the usage: the cycle then skips the call for such
    jobs."""

    admits_unlimited: bool

    def admit(self, job: PendingJob, usage: QueueUsage) -> Admission: ...


class Choice(NamedTuple):
    """A place plugin's answer for one worker: its status and, on success, the node and
    devices. (A tuple, not a dataclass: one is made per worker placed, in the hottest loop.)"""

    status: Status
    node: int = -1
    devices: tuple[int, ...] = ()


NO_NODE = Choice(Status(Code.UNSCHEDULABLE))  # no node of the domain takes the worker now


def chosen(node: int, devices: tuple[int, ...]) -> Choice:
    """SUCCESS on ``node`` with ``devices``: ``Choice(SUCCESS, node, devices)``, made without
    the NamedTuple's keyword handling (half the cost, once per worker placed)."""
    return _new_tuple(Choice, (SUCCESS, node, devices))


_new_tuple = tuple.__new__


@runtime_checkable
class PlacePlugin(Protocol):
    """Step 3: choose a node (and devices) for one worker inside a domain.

    ``prefers_topology`` asks the framework to try gangs under one node, then one leaf, then
    one pod, before anywhere, even when the job did not ask for it. ``first_fit`` promises that
    ``choose`` takes the first candidate of ``Workspace.candidates`` for a request without a
    dataset, drawing no random number and keeping no state (backfill and preemption then work
    on free counts instead of placing for real)."""

    prefers_topology: bool
    first_fit: bool

    def prepare(self, snap: Snapshot, ws: Workspace) -> None: ...

    def choose(self, req: WorkerRequest, ws: Workspace, domain: Domain, rng: Random) -> Choice: ...


@runtime_checkable
class BackfillPlugin(Protocol):
    """Step 4: when the head of the order cannot start, may later jobs start around it?

    ``backfill`` answers per later job (not SUCCESS: it waits, with the status's reason, and
    so does every job after it). ``reserves`` says whether the blocked job gets a reservation
    (its earliest start) that later jobs must not delay; ``assume_limit_s`` stands in for the
    time limit of running jobs that have none when the reservation is worked out (None: such
    jobs never free their devices)."""

    reserves: bool
    assume_limit_s: float | None

    def backfill(self, job: PendingJob, head: PendingJob) -> Status: ...


@dataclass(frozen=True, slots=True)
class Victims:
    """A preempt plugin's answer: SUCCESS with the running jobs that may be stopped so that
    the job can start, best victims first; UNSCHEDULABLE with none."""

    status: Status
    jobs: Sequence[RunningJob] = ()


NO_VICTIMS = Victims(Status(Code.UNSCHEDULABLE))


@runtime_checkable
class PreemptPlugin(Protocol):
    """Step 5: which running jobs may be stopped so that ``job`` can start, best victims first.

    ``victims_key`` is a hashable value such that, within one cycle, jobs with equal keys get
    equal victim lists (None: no such promise for this job). The cycle then asks ``victims``
    once per key, not per job."""

    def victims(
        self,
        job: PendingJob,
        admission: Admission,
        snap: Snapshot,
        usage: QueueUsage,
        order: OrderPlugin,
    ) -> Victims: ...

    def victims_key(
        self,
        job: PendingJob,
        admission: Admission,
        snap: Snapshot,
        usage: QueueUsage,
        order: OrderPlugin,
    ) -> Hashable | None: ...

    def reason_for(
        self, job: PendingJob, victims: Sequence[RunningJob], snap: Snapshot
    ) -> Reason | None: ...


class ProfileError(ValueError):
    pass


def _discover() -> dict[str, Any]:
    """Every plugin module under ``gpufleet.scheduler.plugins``, by its NAME."""
    from gpufleet.scheduler import plugins

    found: dict[str, Any] = {}
    for info in pkgutil.iter_modules(plugins.__path__):
        mod = importlib.import_module(f"{plugins.__name__}.{info.name}")
        name = getattr(mod, "NAME", None)
        if isinstance(name, str):
            found[name] = mod
    return found


_REGISTRY: dict[str, Any] | None = None


def registry() -> dict[str, Any]:
    global _REGISTRY
    if _REGISTRY is None:
        _REGISTRY = _discover()
    return _REGISTRY


def available(point: str) -> list[str]:
    return sorted(n.split("/", 1)[1] for n in registry() if n.startswith(point + "/"))


_PROTOCOLS: dict[str, type] = {
    "order": OrderPlugin,
    "admit": AdmitPlugin,
    "place": PlacePlugin,
    "backfill": BackfillPlugin,
    "preempt": PreemptPlugin,
}


def make(point: str, name: str, options: Mapping[str, Any] | None = None) -> Any:
    full = name if "/" in name else f"{point}/{name}"
    mod = registry().get(full)
    if mod is None or not full.startswith(point + "/"):
        raise ProfileError(
            f"unknown {point} plugin {name!r} (available: {', '.join(available(point))})"
        )
    try:
        plugin = mod.Plugin(**dict(options or {}))
    except (TypeError, ValueError) as e:  # a bad option value too
        raise ProfileError(f"plugin {full}: bad options {dict(options or {})}: {e}") from None
    protocol = _PROTOCOLS.get(point)
    if protocol is not None and not isinstance(plugin, protocol):  # at start-up, not mid-cycle
        raise ProfileError(
            f"plugin {full} lacks members of {protocol.__name__} (derive it from "
            "gpufleet.scheduler.plugins.base)"
        )
    return plugin


@dataclass(frozen=True)
class Profile:
    """The plugins of one scheduler, built once; ``describe()`` names them."""

    order: OrderPlugin
    admit: AdmitPlugin
    place: PlacePlugin
    backfill: BackfillPlugin
    preempt: tuple[PreemptPlugin, ...] = ()
    names: Mapping[str, Any] = field(default_factory=dict)
    seed: int = 0
    max_depth: int = 0  # 0 = consider every pending job each cycle; else Slurm-like depth
    explain: bool = True  # give every pending job a Reason (the simulator may skip it)
    # a video job may use the encoders of a GPU a training job holds (pack_encoders.py)
    pack_encoders: bool = False
    # estimated starts: a job of several GPUs per worker planned per node (estimate_nodes);
    # off (the default): GPUs counted over the cluster. Off because on Philly it is worse with
    # arrivals (BENCHMARKS.md, issue 24), though faithful without them
    plan_per_node: bool = False
    # estimated starts: only a job of several whole GPUs per worker planned per node (its start
    # and, blocked, its shadow and wall); 1-GPU jobs and shares counted over the cluster, not
    # placed (estimate_nodes). Off: as plan_per_node says
    plan_big_per_node: bool = False
    # estimated starts, neither of the two above set: the later of two plans, one over the
    # cluster, one with the big jobs per node (each errs early where the other does not:
    # ADR 0070). Off: the plan over the cluster alone
    plan_later_of_two: bool = True
    # estimated starts: the jobs to come forecast from the recent arrivals (scheduler/arrivals)
    # and played with the pending ones; off: only the pending jobs are planned. Off until it is
    # measured on both Philly slices with plan_per_node (BENCHMARKS.md, issue 24)
    plan_arrivals: bool = False
    # Slurm's SchedulerParameters=kill_invalid_depend: a job whose dependency can never be met
    # is cancelled at once (the JobMaster's); off, Slurm's default: it waits, its Reason
    # DependencyNeverSatisfied, until its user cancels it (ADR 0072)
    kill_invalid_depend: bool = False

    @staticmethod
    def build(
        *,
        order: str = "fifo",
        admit: str = "quota",
        place: str = "bestfit",
        backfill: str = "easy",
        preempt: Sequence[str] = (),
        options: Mapping[str, Mapping[str, Any]] | None = None,
        seed: int = 0,
        max_depth: int = 0,
        explain: bool = True,
        pack_encoders: bool = False,
        kill_invalid_depend: bool = False,
    ) -> Profile:
        """A profile from plugin names; ``options`` maps ``"order/fairshare"`` to its options."""
        opts = dict(options or {})

        def one(point: str, name: str) -> Any:
            full = name if "/" in name else f"{point}/{name}"
            return make(point, full, opts.pop(full, None))

        prof = Profile(
            order=one("order", order),
            admit=one("admit", admit),
            place=one("place", place),
            backfill=one("backfill", backfill),
            preempt=tuple(one("preempt", p) for p in preempt),
            names={
                "order": order,
                "admit": admit,
                "place": place,
                "backfill": backfill,
                "preempt": tuple(preempt),
            },
            seed=seed,
            max_depth=max_depth,
            explain=explain,
            pack_encoders=pack_encoders,
            kill_invalid_depend=kill_invalid_depend,
        )
        if opts:
            raise ProfileError(f"options for plugins not in the profile: {', '.join(opts)}")
        return prof

    def describe(self) -> str:
        n = self.names
        pre = ",".join(n.get("preempt", ())) or "none"
        return (
            f"order={n.get('order')} admit={n.get('admit')} place={n.get('place')} "
            f"backfill={n.get('backfill')} preempt={pre}"
        )
