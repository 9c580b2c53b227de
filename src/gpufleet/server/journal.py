"""The live driver's journal: a step's transitions, node events, audit entries, service
changes (new replica jobs, service records, their history) and defragmentation moves committed
to the store in one transaction before any of its commands reaches an agent (``core.driver``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gpufleet.core.commands import (
    DefragMoved,
    ReplicaAdded,
    ServiceEvent,
    ServiceRecord,
    Transition,
)
from gpufleet.core.controller import Controller
from gpufleet.core.driver import Step
from gpufleet.server.store import JobUpdate

if TYPE_CHECKING:
    from gpufleet.server.service.store import Store

# (actor, role, action, target, detail): one audit entry of a request
AuditRow = tuple[str, str, str, str, dict[str, Any]]


class StoreJournal:
    def __init__(
        self,
        store: Store,
        core: Controller,
        audits: Callable[[Step], list[AuditRow]] | None = None,
        on_committed: Callable[[], None] | None = None,
    ) -> None:
        self.store = store
        self.core = core
        self._audits = audits  # the entries of the requests the step handled (not refused)
        self._on_committed = on_committed

    def commit(self, step: Step) -> None:
        transitions, node_events = _not_stored_yet(step.transitions), step.node_events
        audits = self._audits(step) if self._audits is not None else []
        replicas = [c for c in step.commands if isinstance(c, ReplicaAdded)]
        records = [c for c in step.commands if isinstance(c, ServiceRecord)]
        history = [c for c in step.commands if isinstance(c, ServiceEvent)]
        moves = [c for c in step.commands if isinstance(c, DefragMoved)]
        if not (transitions or node_events or audits or records or history or moves):
            return
        # the controller's own service decisions in the audit log (a user's requests are
        # audited by the request: ``audits``)
        audits += [
            (
                "controller",
                "system",
                f"service.{e.what.replace(' ', '_')}",
                e.service,
                {"why": e.why},
            )
            for e in history
        ]
        changed = dict.fromkeys(t.job_id for t in transitions)
        respec = {t.job_id for t in transitions if t.spec_changed}  # scontrol update's
        updates = [JobUpdate.of_record(self.core.jobs[j], j in respec) for j in changed]
        self.store.apply_transitions(
            transitions,
            updates,
            node_events,
            audits=audits,
            time=step.now,
            replicas=replicas,
            services=records,
            service_events=history,
            defrag_moves=moves,
        )
        if self._on_committed is not None:
            self._on_committed()


def _not_stored_yet(transitions: list[Transition]) -> list[Transition]:
    """Less the "submitted" transitions of jobs that have no other in this step: the turn's
    intake stored each such job as it stands (a PENDING row and its "submitted" event,
    ``add_jobs``), so writing it again would only cost a burst of submissions a second fsync a
    turn (issue 27: four loops of sbatch at Slurm's pace)."""
    moved = {t.job_id for t in transitions if t.old is not None}
    return [t for t in transitions if t.old is not None or t.job_id in moved]
