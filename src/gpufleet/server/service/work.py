"""One item of the controller's inbox: a submission or an event, with whoever awaits it."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Literal

from gpufleet.core.events import JobSubmitted
from gpufleet.server.journal import AuditRow
from gpufleet.server.store import SubmitAudit


@dataclass
class Work:
    kind: Literal["submit", "event"]
    payload: Any  # submit: list[NewJob]; event: Event
    future: asyncio.Future[Any] | None = None
    audit: SubmitAudit | None = None  # submissions: who, audited with the jobs
    # events: the request's audit entry (actor, role, action, target, detail), committed
    # with the transitions it caused
    audit_row: AuditRow | None = None
    quiet: bool = False  # an agent's report: the core refusing it (stale) is not an error
    ids: list[str] | None = None  # submissions: the ids once the store holds the jobs
    events: list[JobSubmitted] = field(default_factory=list)  # submissions: new to the core


def submit_audits(submits: list[Work]) -> list[SubmitAudit]:
    return [w.audit for w in submits if w.audit is not None]


def fail(w: Work, e: Exception) -> None:
    if w.future is not None and not w.future.done():
        w.future.set_exception(e)
