"""What the API shows of the core's state: the service's read methods. The routers (and
listing.py) call these and never reach into the controller (tests/unit/test_layers.py checks),
so what they may read is written in one place, and a change of the core's insides stops here.

Nothing here changes any state. Each method reads ``self.ctrl`` anew: a rebuild after a failed
turn replaces the controller (``ControllerService._install``), so nothing is held on to. They
run on the event loop, like every other access to the core: a caller that wants work off the
loop copies what it needs first (listing.py)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpufleet.core.state import NodeRuntime
from gpufleet.model.cluster import NodeSpec
from gpufleet.model.queue import QueueSpec
from gpufleet.model.resources import MILLI
from gpufleet.scheduler.framework import Profile
from gpufleet.scheduler.never_fits import NeverFits
from gpufleet.scheduler.snapshot import NodeView, PendingJob
from gpufleet.scheduler.trial import Trial, trial
from gpufleet.server.admission import (
    Refusal,
    node_set_problems,
    priority_problems,
    queue_problems,
    reservation_problems,
    sharing_problems,
    valid_queues,
)

if TYPE_CHECKING:
    from gpufleet.core.controller import Controller
    from gpufleet.core.state import JobRecord
    from gpufleet.model.job import JobSpec
    from gpufleet.model.reason import Reason
    from gpufleet.model.resources import Resources
    from gpufleet.scheduler.snapshot import RunningJob


@dataclass(frozen=True, slots=True)
class QueueLoad:
    """A queue's use of the cluster, as GET /queues shows it."""

    used: Resources
    pending: int
    running: int
    dominant_share: float
    fair_share_usage: float  # its decayed usage, which the fair share orders by


class ClusterReads:
    """A mixin of ``ControllerService`` (and of a test's stand-in): it needs ``ctrl``."""

    ctrl: Controller
    queues_declared: bool  # the cluster's files declare its queues (admission.valid_queues)
    _profile: Profile
    _cluster_nodes: tuple[NodeSpec, ...]  # the nodes the cluster spec expects
    # the configured nodes' views and never-fits answers, by the ids of their specs
    _fit_cache: tuple[tuple[int, ...], list[NodeSpec], list[NodeView], NeverFits] | None

    # ----- jobs ----------------------------------------------------------------------------

    def job(self, job_id: str) -> JobRecord | None:
        """The job's record if this process holds it: every unfinished job, and those that
        ended since it started (older ones are in the store only)."""
        return self.ctrl.jobs.get(job_id)

    def ran_on(self, job_id: str, attempt: int, rank: int) -> str | None:
        """The node that ran that rank of that attempt (``Controller.ran_on``)."""
        return self.ctrl.ran_on(job_id, attempt, rank)

    def job_records(self) -> Iterable[JobRecord]:
        """Every record held, in seq order."""
        return self.ctrl.jobs.values()

    def jobs_newest_first(self) -> Iterator[JobRecord]:
        """The records held, newest (highest seq) first; lazily, so a page stops early."""
        return reversed(self.ctrl.jobs.values())

    def trial(self, job: PendingJob, now: float) -> Trial:
        """When and where ``job`` would start were it submitted now (sbatch --test-only):
        one cycle over this moment's snapshot, its decisions thrown away."""
        return trial(self.ctrl.snapshot(now), self.ctrl.profile, job)

    def reason(self, job_id: str) -> Reason | None:
        """Why the job waits (and when it may start), as of the last scheduling pass; a
        running job's, its idle-GPU warning (None if it has none)."""
        if job_id in self.ctrl.running:
            return self.ctrl.idle.reason(job_id)
        last = self.ctrl.last
        return None if last is None else last.reasons.get(job_id)

    def reason_code_of(self, job_id: str) -> Reason | None:
        """``reason`` without its estimated start (the plan's, worked out per job and copied
        into the Reason): for squeue's table, which prints the code only."""
        last = self.ctrl.last
        return None if last is None else last.reasons.raw(job_id)

    def running_jobs(self) -> Mapping[str, RunningJob]:
        """The running jobs by id, with their placements."""
        return self.ctrl.running

    @property
    def pending_count(self) -> int:
        return self.ctrl.pending_count

    # ----- nodes ---------------------------------------------------------------------------

    def node(self, name: str) -> NodeRuntime | None:
        return self.ctrl.nodes.get(name)

    def nodes_by_name(self) -> list[tuple[str, NodeRuntime]]:
        """Every node the controller knows, sorted by name."""
        nodes = self.ctrl.nodes
        return [(name, nodes[name]) for name in sorted(nodes)]

    def powered_off(self) -> list[tuple[NodeSpec, str, str]]:
        """The elastic pools' nodes that are not up, sorted by name: (spec, power state, why);
        Slurm's POWERED_DOWN, POWERING_UP, POWERING_DOWN, and failed (core/elastic/book.py)."""
        book = self.ctrl.elastic.book
        return [
            (n.spec, n.power.value, n.why)
            for name, n in sorted(book.nodes.items())
            if n.power.value != "up"
        ]

    def powered_off_node(self, name: str) -> tuple[NodeSpec, str, str] | None:
        n = self.ctrl.elastic.book.get(name)
        if n is None or n.power.value == "up":
            return None
        return n.spec, n.power.value, n.why

    def node_jobs(self, name: str) -> list[str]:
        """The ids of the running jobs with a rank on the node."""
        return [
            jid for jid, r in self.ctrl.running.items() if any(p.node == name for p in r.allocation)
        ]

    # ----- queues --------------------------------------------------------------------------

    def configured_queues(self) -> list[str]:
        """The queues a job may name, sorted: those the cluster declares or an admin made, and
        ``default`` where the cluster's files declare none (``admission.valid_queues``)."""
        return valid_queues(self.ctrl.queues, self.queues_declared)

    def admission(self, spec: JobSpec, role: str) -> Refusal:
        """Everything that refuses ``spec``, submitted with a ``role`` token, at submit
        (admission.py), all of it at once."""
        refusal = Refusal()
        refusal.invalid += queue_problems(spec, self.configured_queues())
        resv = self.ctrl.state.reservations
        refusal.invalid += reservation_problems(spec, resv, self.ctrl.now, role)
        refusal.forbidden += priority_problems(spec, role, self.ctrl.queues)
        nodes, memo = self._configured_nodes()
        refusal.invalid += node_set_problems(spec, self.ctrl.queues, nodes, self._profile, memo)
        refusal.invalid += sharing_problems(spec, self.ctrl.queues, nodes)
        return refusal

    def _configured_nodes(self) -> tuple[list[NodeView], NeverFits]:
        """Every node the cluster has, down or not, as if up and empty: those registered and
        those its cluster spec expects. Made again only when a node's spec changes (the ids of
        the specs, which are kept while cached); the never-fits answers with them."""
        specs = [n.spec for n in self.ctrl.nodes.values()]
        known = {s.name for s in specs}
        specs += [s for s in self._cluster_nodes if s.name not in known]
        key = tuple(map(id, specs))
        if self._fit_cache is None or self._fit_cache[0] != key:
            views = [NodeRuntime.of(s).view() for s in specs]
            self._fit_cache = (key, specs, views, NeverFits())
        return self._fit_cache[2], self._fit_cache[3]

    def entitlement_terms(self) -> tuple[dict[str, float], float]:
        """What fairness against entitlement is measured by: each queue's weight, the GPUs."""
        weights = {q.name: q.weight for q in self.ctrl.queues.values()}
        return weights, self.ctrl.state.capacity.gpu_milli / MILLI

    def queue(self, name: str) -> QueueSpec:
        """The queue as configured, or the default one a job may name without configuring."""
        return self.ctrl.queues.get(name) or QueueSpec(name)

    def queue_names(self) -> list[str]:
        """The queues worth showing, sorted: those a job may name (``default`` alone on a
        cluster that declares none, as sinfo shows it), those with jobs, and those with past
        usage the fair share still counts (their jobs may have ended before a restart)."""
        c = self.ctrl
        names = set(self.configured_queues()) | {r.job.spec.queue for r in c.jobs.values()}
        names |= {q for q, u in c.ledger.values.items() if u > 0}
        return sorted(names)

    def queue_load(self, name: str) -> QueueLoad:
        c = self.ctrl
        return QueueLoad(
            used=c.queue_used(name),
            # counted from the core's pending views: no snapshot per queue
            pending=sum(1 for p in c.pending_jobs() if p.spec.queue == name),
            running=sum(1 for r in c.running.values() if r.spec.queue == name),
            dominant_share=c.dominant_shares().get(name, 0.0),
            fair_share_usage=c.ledger.values.get(name, 0.0),
        )
