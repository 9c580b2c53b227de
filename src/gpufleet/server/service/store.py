"""What the controller service needs of its store: the typed face of ``server.store.Store``
(which satisfies it), so that each step's use of the store is checked, and a test's stand-in
says which part it stands in for."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any, Protocol

from gpufleet.api.nodecommands import NodeCommandOut, NodeCommandResult
from gpufleet.core.commands import (
    DefragMoved,
    NodeEvent,
    ReplicaAdded,
    ServiceEvent,
    ServiceRecord,
    Transition,
)
from gpufleet.model.job import JobState
from gpufleet.model.queue import QueueSpec
from gpufleet.model.reservation import NodeReservation
from gpufleet.server.journal import AuditRow
from gpufleet.server.store.bodies import Bodies
from gpufleet.server.store.records import (
    JobEvent,
    JobUpdate,
    NewJob,
    NodeEventRecord,
    NodeRecord,
    RestartState,
    StoredJob,
    SubmitAudit,
    TokenInfo,
)
from gpufleet.server.store.services import ServiceEventRecord


class Store(Protocol):
    # ----- recovery: is it there, and what it holds ---------------------------------------
    def probe(self) -> None: ...

    def load_jobs_for_restart(self, known: Bodies | None = None) -> RestartState: ...

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
        known: set[str] | None = None,
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
        defrag_moves: Sequence[DefragMoved] = (),
    ) -> None: ...

    def save_fairshare_usage(self, values: Mapping[str, float], as_of: float) -> None: ...

    def add_gpu_use(self, used: Mapping[tuple[str, str, float], float]) -> None: ...

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

    def put_reservation(self, r: NodeReservation, *, now: float, audit: AuditRow) -> None: ...

    def delete_reservation(self, name: str, *, now: float, audit: AuditRow) -> bool: ...

    def reservations(self) -> list[NodeReservation]: ...

    # ----- node operations (store/nodeops.py) --------------------------------------------
    def add_node_command(self, cmd: NodeCommandOut, *, audit: AuditRow) -> None: ...

    def node_command(self, cid: str) -> NodeCommandOut | None: ...

    def node_commands(
        self, node: str | None = None, *, unfinished: bool = False, limit: int = 100
    ) -> list[NodeCommandOut]: ...

    def node_commands_taken(self, node: str, ids: list[str]) -> None: ...

    def finish_node_command(
        self, node: str, res: NodeCommandResult, *, now: float
    ) -> NodeCommandOut | None: ...

    def put_maintenance(
        self,
        mid: str,
        doc: Mapping[str, Any],
        *,
        active: bool,
        now: float,
        events: list[NodeEvent] | None = None,
        audits: list[AuditRow] | None = None,
    ) -> None: ...

    def maintenances(self, *, active_only: bool = False) -> list[dict[str, Any]]: ...

    # ----- what only the store remembers (jobs ended before this process, histories) -----
    def job(self, job_id: str) -> StoredJob | None: ...

    def next_job_id(self) -> str: ...

    def job_events(self, job_id: str) -> list[JobEvent]: ...

    def node_events(
        self, name: str | None = None, limit: int | None = 100
    ) -> list[NodeEventRecord]: ...

    def service_events(self, name: str, limit: int | None = 50) -> list[ServiceEventRecord]: ...

    def service_next_index(self, name: str) -> int: ...

    def active_tokens(self) -> list[tuple[str, TokenInfo]]: ...
