"""Services in the store on SQLite and PostgreSQL, as the live controller writes them: the core's
commands of a step (``ReplicaAdded``, ``ServiceRecord``, ``ServiceEvent``) committed by the
server's journal, and a controller rebuilt from the store that keeps the same replicas."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from gpufleet.core.commands import ReplicaAdded
from gpufleet.core.controller import Controller
from gpufleet.core.driver import Driver, Step
from gpufleet.core.events import Event, ServiceCreated, ServiceDeleted, ServiceUpdated
from gpufleet.model.job import JobSpec, JobState
from gpufleet.model.service import ServiceSpec
from gpufleet.scheduler.framework import Profile
from gpufleet.server.journal import StoreJournal
from gpufleet.server.store import NewJob, Store
from gpufleet.server.store.schema import jobs
from gpufleet.server.store.services import record_from_dict, record_to_dict

pytestmark = pytest.mark.both_stores  # the store's contract: SQLite and PostgreSQL

S = JobState


class _Nowhere:
    def apply(self, commands: object) -> None:
        return None


def svc(command: str = "serve", replicas: int = 2) -> ServiceSpec:
    return ServiceSpec.from_dict(
        {
            "name": "web",
            "replicas": replicas,
            "replica": {"user": "alice", "gpus_per_worker": 1, "command": [command]},
            "readiness": {"http": {"path": "/ready"}},
        }
    )


def controller(store: Store) -> Controller:
    """A controller rebuilt from the store as ``ControllerService._restore`` does it."""
    ctrl = Controller(Profile.build(), None)
    rs = store.load_jobs_for_restart()
    ctrl.restore((), rs.restored_jobs(), services=rs.services)
    return ctrl


def step(store: Store, ctrl: Controller, now: float, *events: Event) -> Step:
    journal = StoreJournal(store, ctrl)
    return Driver(ctrl, _Nowhere(), journal).step(now, events)


def test_replicas_records_and_history_commit_with_the_step(store: Store) -> None:
    ctrl = controller(store)
    done = step(store, ctrl, 10.0, ServiceCreated(svc()))
    assert [c.job_id for c in done.commands if isinstance(c, ReplicaAdded)] == ["web.1", "web.2"]
    rows = {j.id: j for j in store.list_jobs(limit=None)}
    assert set(rows) == {"web.1", "web.2"}
    assert all(j.state is S.PENDING and j.spec.user == "alice" for j in rows.values())
    assert [e.why for e in store.job_events("web.1")] == ["submitted"]
    (row,) = store.services()
    assert (row.name, row.user, row.queue, row.spec.replicas) == ("web", "alice", "default", 2)
    assert [r.job_id for r in row.record.replicas] == ["web.1", "web.2"]
    assert record_from_dict(record_to_dict(row.record)) == row.record
    assert [e.what for e in store.service_events("web")] == ["created"]
    assert store.services(user="bob") == []
    audit = [e.action for e in store.audit_log(target="web")]
    assert audit == ["service.created"]


def test_a_controller_rebuilt_from_the_store_keeps_the_replicas(store: Store) -> None:
    ctrl = controller(store)
    step(store, ctrl, 10.0, ServiceCreated(svc()))
    again = controller(store)  # "the restart"
    assert set(again.services.services["web"].replicas) == {"web.1", "web.2"}
    out = again.tick(20.0)
    assert not [c for c in out if isinstance(c, ReplicaAdded)]  # no duplicates
    assert again.services.services["web"].generation == 1
    # an update rolls out generation 2 on the rebuilt controller, numbered on from web.2
    done = step(store, again, 30.0, ServiceUpdated(svc("serve-v2")))
    new = [c for c in done.commands if isinstance(c, ReplicaAdded)]
    assert [(c.job_id, c.generation) for c in new] == [("web.3", 2), ("web.4", 2)]
    (row,) = store.services()
    assert row.record.generation == 2 and row.spec.replica.command == ("serve-v2",)
    third = controller(store)
    assert third.services.services["web"].generation == 2


def test_deleted_service_row_goes_its_history_stays_and_names_are_not_reused(
    store: Store,
) -> None:
    ctrl = controller(store)
    step(store, ctrl, 10.0, ServiceCreated(svc()))
    step(store, ctrl, 11.0, ServiceDeleted("web"))  # pending replicas: cancelled at once
    assert store.services() == [] and store.service("web") is None
    assert {j.state for j in store.list_jobs(limit=None)} == {S.CANCELLED}
    assert [e.what for e in store.service_events("web")] == ["created", "deleting", "removed"]
    first = store.service_next_index("web")
    assert first == 3
    done = step(store, ctrl, 12.0, ServiceCreated(svc(), first_index=first))
    assert [c.job_id for c in done.commands if isinstance(c, ReplicaAdded)] == ["web.3", "web.4"]


def test_replica_rows_keep_their_service_and_generation(store: Store) -> None:
    ctrl = controller(store)
    step(store, ctrl, 10.0, ServiceCreated(svc(replicas=1)))
    store.add_jobs([NewJob(JobSpec("plain", "bob"), 11.0)])  # numbered after the replica
    with store.engine.connect() as c:
        got = sorted(c.execute(sa.select(jobs.c.id, jobs.c.service, jobs.c.generation)).all())
    assert [tuple(r) for r in got] == [("2", None, None), ("web.1", "web", 1)]
