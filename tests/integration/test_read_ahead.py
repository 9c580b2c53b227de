"""A standby reads the jobs' bodies ahead (ADR 0059, issue 26): its takeover's read-back then
decodes no spec of a job it has read already (counted, not timed), and what it reads is what
a read-back without them reads, whatever changed since (state, queue, new and ended jobs)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gpufleet.base.clock import ManualClock
from gpufleet.core.commands import Transition
from gpufleet.model.job import JobSpec, JobState
from gpufleet.scheduler.framework import Profile
from gpufleet.server.ha.readahead import ReadAhead
from gpufleet.server.logs import LogStore
from gpufleet.server.service import ControllerService
from gpufleet.server.store import JobUpdate, NewJob, Store
from gpufleet.server.store import bodies as bodies_module
from gpufleet.server.store import jobs as jobs_module
from gpufleet.server.store.bodies import MUTABLE
from gpufleet.server.store.codec import spec_from_dict

pytestmark = pytest.mark.both_stores
HELD = 300  # jobs waiting on a dependency, as the failover bench's load
S = JobState


@pytest.fixture
def decodes(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The names of the specs decoded from the store, in order."""
    seen: list[str] = []

    def counted(data: Any) -> JobSpec:
        seen.append(str(data.get("name")))
        return spec_from_dict(data)

    monkeypatch.setattr(jobs_module, "spec_from_dict", counted)
    monkeypatch.setattr(bodies_module, "spec_from_dict", counted)
    yield seen


def caught_up(store: Store) -> ReadAhead:
    ra = ReadAhead(store, batch=100)  # several reads: the cursor moves on between them
    while ra.pass_once():
        pass
    assert ra.caught_up
    return ra


def held_jobs(store: Store, n: int) -> str:
    (gate,) = store.add_jobs([NewJob(JobSpec("gate", "alice", gpus_per_worker=1))])
    store.add_jobs(
        [
            NewJob(
                JobSpec(f"held-{k}", "alice", gpus_per_worker=1), depends_on=(("afterok", gate),)
            )
            for k in range(n)
        ]
    )
    return gate


def test_a_takeover_decodes_no_spec_that_its_standby_read_ahead(
    store: Store, tmp_path: Path, decodes: list[str]
) -> None:
    held_jobs(store, HELD)
    ra = caught_up(store)
    assert len(ra.bodies) == HELD + 1
    # the gate and the held jobs are alike but their names: one spec decoded (ADR 0063)
    assert decodes == ["gate"]
    (late,) = store.add_jobs([NewJob(JobSpec("late", "bob"))])  # after the standby's last read
    decodes.clear()
    svc = ControllerService(store, Profile.build(), ManualClock(1e9), logs=LogStore(tmp_path))
    svc.bodies = ra.stop()  # as HighAvailability._elected hands them over
    svc._restore()
    assert len(svc.ctrl.jobs) == HELD + 2  # every unfinished job read back
    # of the jobs read ahead, none (the read-back's listing of the newest decodes "late")
    assert not [d for d in decodes if d != "late"] and "late" in decodes
    assert svc.ctrl.jobs[late].job.spec.user == "bob"
    assert sorted(
        r.job.spec.name for r in svc.ctrl.jobs.values() if r.job.spec.name != "late"
    ) == sorted(["gate", *(f"held-{k}" for k in range(HELD))])
    assert svc.ctrl.jobs[late].job.state is S.PENDING


def test_the_read_back_with_bodies_read_ahead_is_the_read_back_without(store: Store) -> None:
    gate = held_jobs(store, 5)
    (multi, running, ends, retried) = store.add_jobs(
        [
            NewJob(JobSpec("multi", "alice", "a", queues=("a", "b"))),
            NewJob(JobSpec("running", "alice")),
            NewJob(JobSpec("ends", "alice")),
            NewJob(JobSpec("retried", "alice", max_retries=2)),
        ]
    )
    ra = caught_up(store)
    ahead = {j.id: j for j in store.load_jobs_for_restart(ra.bodies).jobs}
    # changes after the standby's read: each is read at the takeover, not from its bodies
    t0 = 1e9
    store.apply_transitions(
        [
            Transition(multi, 1, S.PENDING, S.RUNNING, t0),
            Transition(running, 1, S.PENDING, S.RUNNING, t0),
            Transition(ends, 1, S.PENDING, S.SUCCEEDED, t0),
            Transition(retried, 1, S.PENDING, S.FAILED, t0),
        ],
        [
            JobUpdate(multi, S.RUNNING, 1, 0, t0, None, t0, 0.0, queue="b"),
            JobUpdate(running, S.RUNNING, 1, 0, t0, None, t0, 5.0),
            JobUpdate(retried, S.FAILED, 1, 1, t0, t0 + 1, t0, 0.0),
        ],
    )
    store.add_jobs([NewJob(JobSpec("new", "bob"), depends_on=(("afterany", gate),))])
    known = ra.bodies
    with_bodies = store.load_jobs_for_restart(known)
    without = store.load_jobs_for_restart()
    assert with_bodies == without
    by_id = {j.id: j for j in with_bodies.jobs}
    # a row whose mutable columns did not change is the job built ahead; a changed one anew
    assert by_id[gate] is ahead[gate] and by_id[multi] is not ahead[multi]
    assert by_id[multi] != ahead[multi]
    assert ends not in by_id and by_id[retried].state is S.FAILED
    assert by_id[multi].spec.queue == "b"  # the row's queue over the spec's
    assert by_id[running].attained_gpu_s == 5.0
    # the standby forgets the finished jobs' bodies
    ra.prune()
    assert known.get(ends, 0, 0) is None
    assert len(known) == len(without.jobs)


def test_nothing_stored_ever_changes_a_jobs_body() -> None:
    """What makes a body read ahead never stale: no statement of the store updates
    ``depends_on`` of a job row, one sets the spec alone (``scontrol update``: a takeover
    compares the spec's digest, the test below), the others the mutable columns only, and no
    job row is deleted."""
    root = Path(jobs_module.__file__).parent
    updates = {
        p.name: len(re.findall(r"update\(\s*jobs\b", p.read_text())) for p in root.glob("*.py")
    }
    assert {k: n for k, n in updates.items() if n} == {"jobs.py": 3}  # the three below
    assert not any(re.search(r"delete\(\s*jobs\b", p.read_text()) for p in root.glob("*.py"))
    spec_sets = str(jobs_module._UPDATE_SPEC).split(" SET ", 1)[1].split(" WHERE ", 1)[0]
    assert set(re.findall(r"(?:^|, )(\w+)=", spec_sets)) == {"spec"}, spec_sets
    for stmt in (jobs_module._UPDATE, jobs_module._UPDATE_STATE):
        sets = str(stmt).split(" SET ", 1)[1].split(" WHERE ", 1)[0]
        # only the mutable columns, which a takeover reads again (ADR 0063)
        assert set(re.findall(r"(?:^|, )(\w+)=", sets)) <= set(MUTABLE), sets


def test_a_spec_rewritten_after_the_read_ahead_is_read_again_at_the_takeover(
    store: Store,
) -> None:
    """``scontrol update`` of a pending job (ADR 0076) changes its spec and none of its
    mutable columns: the takeover sees the new spec, not the body the standby read."""
    gate = held_jobs(store, 2)
    (held,) = [j.id for j in store.load_jobs_for_restart().jobs if j.id != gate][:1]
    ra = caught_up(store)
    old = {j.id: j for j in store.load_jobs_for_restart(ra.bodies).jobs}[held]
    longer = replace(old.spec, time_limit_s=7200.0)
    store.apply_transitions(
        [], [JobUpdate(held, S.PENDING, 0, 0, None, None, old.eligible_time, 0.0, spec=longer)]
    )
    now = {j.id: j for j in store.load_jobs_for_restart(ra.bodies).jobs}
    assert now[held].spec.time_limit_s == 7200.0
    assert now == {j.id: j for j in store.load_jobs_for_restart().jobs}
    assert now[gate] is {j.id: j for j in store.load_jobs_for_restart(ra.bodies).jobs}[gate]
