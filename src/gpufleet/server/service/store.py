"""What the controller service needs of its store: the typed face of ``server.store.Store``
(which satisfies it), so that each step's use of the store is checked, and a test's stand-in
says which part it stands in for."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any, Protocol

from gpufleet.core.commands import (
    NodeEvent,
    ReplicaAdded,
    ServiceEvent,
    ServiceRecord,
    Transition,
)
from gpufleet.model.job import JobState
from gpufleet.model.queue import QueueSpec
from gpufleet.server.journal import AuditRow
from gpufleet.server.store.records import (
    JobEvent,
    JobUpdate,
    NewJob,
    NodeEventRecord,
    NodeRecord,
    RestartState,
    StoredJob,
    SubmitAudit,
)
from gpufleet.server.store.services import ServiceEventRecord


class Store(Protocol):
    # ----- recovery: is it there, and what it holds ---------------------------------------
    def probe(self) -> None: ...

    def load_jobs_for_restart(self) -> RestartState: ...

    def list_jobs(
        self,
        *,
        user: str | None = None,
        queue: str | None = None,
        state: JobState | Collection[JobState] | None = None,
        limit: int | None = 100,
        newest_first: bool = False,
        max_seq: int | None = None,
    ) -> list[StoredJob]: ...

    def fairshare_usage(self) -> tuple[dict[str, float], float | None]: ...

    def queues(self) -> list[QueueSpec]: ...

    # ----- intake and the turn's commit ---------------------------------------------------
    def add_jobs(
        self,
        new: Sequence[NewJob],
        now: float | None = None,
        *,
        audits: Sequence[SubmitAudit] = (),
    ) -> list[str]: ...

    def apply_transitions(
        self,
        transitions: Sequence[Transition],
        job_updates: Sequence[JobUpdate] = (),
        node_events: Sequence[NodeEvent] = (),
        *,
        audits: Sequence[AuditRow] = (),
        time: float | None = None,
        replicas: Sequence[ReplicaAdded] = (),
        services: Sequence[ServiceRecord] = (),
        service_events: Sequence[ServiceEvent] = (),
    ) -> None: ...

    def save_fairshare_usage(self, values: Mapping[str, float], as_of: float) -> None: ...

    def audit(
        self,
        actor: str,
        actor_role: str,
        action: str,
        target: str,
        detail: Mapping[str, Any] | None = None,
        *,
        time: float | None = None,
    ) -> int: ...

    # ----- agents and admins --------------------------------------------------------------
    def upsert_node(self, node: NodeRecord) -> None: ...

    def put_queue(
        self, spec: QueueSpec, *, now: float | None = None, audit: AuditRow | None = None
    ) -> None: ...

    # ----- what only the store remembers (jobs ended before this process, histories) -----
    def job(self, job_id: str) -> StoredJob | None: ...

    def job_events(self, job_id: str) -> list[JobEvent]: ...

    def node_events(
        self, name: str | None = None, limit: int | None = 100
    ) -> list[NodeEventRecord]: ...

    def service_events(self, name: str, limit: int | None = 50) -> list[ServiceEventRecord]: ...

    def service_next_index(self, name: str) -> int: ...
