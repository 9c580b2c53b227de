"""The controller's in-memory state: nodes with their free capacity, jobs with their attempts.

Everything here is derived from events; the store holds the same facts durably."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpufleet.model.allocation import Allocation
from gpufleet.model.cluster import NodeSpec
from gpufleet.model.engines import gpu_features
from gpufleet.model.job import Job, JobState
from gpufleet.model.job_end import exit_status
from gpufleet.model.resources import MILLI
from gpufleet.scheduler.snapshot import NO_MARK, NodeView, PendingJob, RunningJob, ServiceMark


@dataclass(slots=True)
class NodeRuntime:
    spec: NodeSpec
    gpu_free: list[int]
    cpu_free: int
    mem_free: int
    healthy: bool = True
    drained: bool = False
    health_drained: bool = False  # drained by the controller for a failed check, not by an admin
    drain_deadline: float | None = None  # a drain's: what runs there then is stopped
    drain_why: str = ""  # that drain's reason (``why`` may change meanwhile)
    lost: bool = False
    # ranks launched here never started within the launch deadline: nothing is placed here
    # until its agent registers again or reports a started task
    suspect: bool = False
    why: str = ""
    bad_gpus: frozenset[int] = frozenset()
    datasets: frozenset[str] = frozenset()
    _view: NodeView | None = None

    @staticmethod
    def of(
        spec: NodeSpec, healthy: bool = True, datasets: frozenset[str] = frozenset()
    ) -> NodeRuntime:
        return NodeRuntime(
            spec, [MILLI] * spec.gpus, spec.cpu_milli, spec.memory_mib, healthy, datasets=datasets
        )

    @property
    def schedulable(self) -> bool:
        return self.healthy and not self.drained and not self.lost and not self.suspect

    @property
    def state(self) -> str:
        if self.lost:
            return "lost"
        if not self.healthy:
            return "unhealthy"
        if self.suspect:
            return "suspect"
        if self.drained:
            return "drained"
        used = sum(MILLI - g for g in self.gpu_free)
        if used == 0 and self.cpu_free == self.spec.cpu_milli:
            return "idle"
        return "allocated" if all(g == 0 for g in self.gpu_free) and self.gpu_free else "mixed"

    def changed(self) -> None:
        self._view = None

    def view(self) -> NodeView:
        if self._view is None:
            s = self.spec
            free = tuple(0 if d in self.bad_gpus else g for d, g in enumerate(self.gpu_free))
            self._view = NodeView(
                s.name,
                s.leaf,
                s.pod,
                s.gpu_model,
                free,
                self.cpu_free,
                self.mem_free,
                s.cpu_milli,
                s.memory_mib,
                self.schedulable,
                s.labels,
                self.datasets,
                # the site's features and what its GPUs have (-C nvenc, -C graphics)
                frozenset(s.features) | gpu_features(s.gpu_model),
                s.gpu_type,
            )
        return self._view


@dataclass(frozen=True, slots=True)
class RestoredJob:
    """What the store gives back for one job at restart."""

    job: Job
    seq: int
    allocation: Allocation = ()
    borrowing: bool = False
    depends_on: tuple[tuple[str, str], ...] = ()
    array_id: str | None = None
    array_limit: int = 0
    array_index: int | None = None


@dataclass(slots=True)
class JobRecord:
    """A job and what the JobMaster tracks about its current attempt."""

    job: Job
    seq: int
    allocation: Allocation = ()
    borrowing: bool = False
    started_ranks: set[int] = field(default_factory=set)
    exited: dict[int, int] = field(default_factory=dict)  # rank → exit code
    # the attempt's deciding exit as (code, signal): a batch job's script's (rank 0), else
    # the first rank that failed (rank 0's while none has); what the job's ``ended`` says
    exit_status: tuple[int, int] | None = None
    ending: JobState | None = None  # where the attempt goes once every rank has exited
    ending_why: str = ""
    stopping_since: float | None = None  # when the stop of this attempt began
    # when this attempt last wrote its checkpoint file (its agent's report; not stored: after
    # a controller restart the attempt's start stands in until the next report)
    checkpoint_time: float | None = None
    noticed: bool = False  # its stop gave notice (a preemption's): its ranks wait for it
    depends_on: tuple[tuple[str, str], ...] = ()
    oracle_duration_s: float | None = None
    failure: str = ""
    nominated: bool = False  # victims were preempted for it: it goes first until it starts
    array_id: str | None = None
    array_limit: int = 0  # Slurm's %N throttle of its array (0: none)
    array_index: int | None = None  # its task's index (SLURM_ARRAY_TASK_ID)
    # each attempt's node per rank, for the attempts this process started (or restored): an
    # agent may still send an older attempt's logs, and only the node that ran it may
    ran_on: dict[int, tuple[str, ...]] = field(default_factory=dict)
    mark: ServiceMark = NO_MARK  # the order's per-job account (LAS' starvation rule)
    replica: bool = False  # a service's replica (the ServiceMaster's): it keeps no work to lose

    @property
    def id(self) -> str:
        return self.job.id

    def note_exit(self, rank: int, code: int, why: str) -> None:
        """A rank's exit, as the job's ``exit_status`` counts it."""
        batch = self.job.spec.batch
        if batch and rank != 0:
            return
        if self.exit_status is None or (not batch and self.exit_status == (0, 0) and code):
            self.exit_status = exit_status(code, why)

    def live_ranks(self) -> tuple[int, ...]:
        return tuple(r for r in range(len(self.allocation)) if r not in self.exited)

    def pending_view(
        self,
        waiting_for: str = "",
        throttled: bool = False,
        never_met: bool = False,
        deps: tuple[str, ...] = (),
        held: str = "",
    ) -> PendingJob:
        j = self.job
        return PendingJob(
            j.id,
            j.spec,
            j.submit_time,
            self.seq,
            j.attained_gpu_s,
            j.eligible_time,
            waiting_for,
            self.oracle_duration_s,
            self.nominated,
            throttled,
            self.mark,
            never_met,
            deps,
            held,
            self.array_id or "",
        )

    def running_view(self) -> RunningJob:
        j = self.job
        live = self.allocation
        if self.exited:
            live = tuple(p for r, p in enumerate(self.allocation) if r not in self.exited)
        return RunningJob(
            j.id,
            j.spec,
            live,
            j.start_time or 0.0,
            self.borrowing,
            j.attained_gpu_s,
            self.stopping_since,
            self.checkpoint_time,
            self.mark,
            self.replica,
        )
