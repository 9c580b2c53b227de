"""The durable store on SQLite and PostgreSQL (``db_url`` in tests/conftest.py)."""

from __future__ import annotations

import dataclasses
import json
import threading
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.core.commands import NodeEvent, Transition
from gpufleet.model.allocation import Placement
from gpufleet.model.cluster import NodeSpec
from gpufleet.model.job import JobSpec, JobState, Topology, TopologyLevel, WarningSignal
from gpufleet.model.job_end import JobEnd
from gpufleet.model.queue import QueueSpec
from gpufleet.model.resources import Resources
from gpufleet.server.store import (
    IdempotencyConflict,
    JobUpdate,
    NewJob,
    NodeRecord,
    Store,
    StoreError,
    SubmitAudit,
    spec_from_dict,
    spec_to_dict,
)
from gpufleet.server.store.codec import CodecError

pytestmark = pytest.mark.both_stores  # the store's contract: SQLite and PostgreSQL

S = JobState
FULL_SPEC = JobSpec(
    name="train-llm",
    user="alice",
    queue="vision",
    workers=2,
    gpus_per_worker=4,
    gpu_milli=1000,
    cpu_milli=12500,
    memory_mib=65536,
    gpu_models=("H100-SXM", "A100-SXM4-80GB"),
    time_limit_s=3600.5,
    priority=-7,
    preemptible=False,
    topology=Topology(TopologyLevel.LEAF, required=True),
    dataset="imagenet",
    max_retries=3,
    command=("torchrun", "train.py", "--lr=0.1"),
    env=(("A", "1"), ("NCCL_DEBUG", "INFO")),
    signal=WarningSignal(10, 90, batch_only=True),
    requeue=False,
    queues=("vision", "spare"),
    kill_invalid_dep=False,
)


def spec(user: str = "alice", queue: str = "default", **kw: Any) -> JobSpec:
    return JobSpec(name=f"job-{user}", user=user, queue=queue, **kw)


def one(store: Store, user: str = "alice", t: float = 0.0, **kw: Any) -> str:
    return store.add_jobs([NewJob(spec(user, **kw), t)])[0]


# ----- specs --------------------------------------------------------------------------------


def test_codec_covers_every_spec_field() -> None:
    names = {f.name for f in dataclasses.fields(JobSpec)}
    assert set(spec_to_dict(FULL_SPEC)) == names
    assert spec_from_dict(spec_to_dict(FULL_SPEC)) == FULL_SPEC
    assert spec_from_dict({"name": "n", "user": "u"}) == JobSpec("n", "u")  # defaults fill in


text = st.text(max_size=12)
specs = st.builds(
    JobSpec,
    name=text,
    user=text,
    queue=text,
    workers=st.integers(1, 4096),
    gpus_per_worker=st.integers(0, 64),
    gpu_milli=st.integers(1, 1000),
    cpu_milli=st.integers(0, 10**6),
    memory_mib=st.integers(0, 10**7),
    gpu_models=st.lists(text, max_size=3).map(tuple),
    time_limit_s=st.none() | st.floats(0.001, 1e7),
    priority=st.integers(-(10**6), 10**6),
    preemptible=st.booleans(),
    topology=st.builds(Topology, st.sampled_from(list(TopologyLevel)), st.booleans()),
    dataset=text,
    max_retries=st.integers(0, 100),
    command=st.lists(text, max_size=4).map(tuple),
    env=st.lists(st.tuples(text, text), max_size=3).map(tuple),
    signal=st.none()
    | st.builds(WarningSignal, st.integers(1, 64), st.integers(0, 65535), st.booleans()),
    requeue=st.booleans(),
    kill_invalid_dep=st.none() | st.booleans(),
)


@given(specs)
def test_codec_round_trips_any_spec(s: JobSpec) -> None:
    assert spec_from_dict(json.loads(json.dumps(spec_to_dict(s)))) == s


def test_codec_refuses_unknown_keys() -> None:
    with pytest.raises(CodecError, match="unknown key 'gpus'"):
        spec_from_dict({"name": "n", "user": "u", "gpus": 8})


def test_spec_round_trips_through_the_database(store: Store) -> None:
    fractional = JobSpec("share", "bob", gpu_milli=250, time_limit_s=None)
    ids = store.add_jobs([NewJob(FULL_SPEC, 10.25), NewJob(fractional, 11.0)])
    a, b = (store.job(i) for i in ids)
    assert a is not None and b is not None
    assert a.spec == FULL_SPEC and b.spec == fractional
    assert a.submit_time == 10.25 and a.state is S.PENDING and a.attempt == 0


# ----- submissions --------------------------------------------------------------------------


def test_add_jobs_is_all_or_nothing(store: Store) -> None:
    # the third row breaks the (array_id, array_index) unique constraint inside the database
    bad = [
        NewJob(spec(), 1.0, array_index=0),
        NewJob(spec(), 1.0, array_index=1),
        NewJob(spec(), 1.0, array_index=1),
    ]
    with pytest.raises(StoreError, match="refused by the database"):
        store.add_jobs(bad)
    with pytest.raises(StoreError, match="dependency afterok:999 is not a known job"):
        store.add_jobs([NewJob(spec(), 1.0), NewJob(spec(), 1.0, depends_on=(("afterok", "999"),))])
    with pytest.raises(StoreError, match=r"jobs\[1\]: unknown dependency type"):
        store.add_jobs([NewJob(spec(), 1.0), NewJob(spec(), 1.0, depends_on=(("after", "1"),))])
    with pytest.raises(StoreError, match=r"jobs\[1\]: user must be 1 to 128 characters"):
        store.add_jobs([NewJob(spec(), 1.0), NewJob(spec("u" * 129), 1.0)])
    assert store.list_jobs() == []
    assert store.add_jobs([NewJob(spec(), 2.0)]) == ["1"]  # no id was used up by the failures


def test_submission_audits_are_written_with_their_jobs_or_not_at_all(store: Store) -> None:
    batch = [NewJob(spec("alice"), 1.0), NewJob(spec("alice"), 1.0), NewJob(spec("bob"), 1.0)]
    audits = [SubmitAudit("user:a", "user", 2, "sweep"), SubmitAudit("user:b", "user", 1, "one")]
    assert store.add_jobs(batch, 5.0, audits=audits) == ["1", "2", "3"]
    got = [(a.actor, a.action, a.target, a.detail, a.time) for a in store.audit_log(limit=None)]
    assert got == [
        ("user:a", "job.submit", "1,2", {"count": 2, "name": "sweep"}, 5.0),
        ("user:b", "job.submit", "3", {"count": 1, "name": "one"}, 5.0),
    ]
    # a refused batch leaves neither jobs nor audit entries
    bad = [NewJob(spec(), 1.0, depends_on=(("afterok", "999"),))]
    with pytest.raises(StoreError):
        store.add_jobs(bad, 6.0, audits=[SubmitAudit("user:c", "user", 1, "x")])
    assert len(store.audit_log(limit=None)) == 2 and len(store.list_jobs()) == 3
    with pytest.raises(ValueError, match="audits cover 1 of 2 jobs"):
        store.add_jobs(batch[:2], audits=[SubmitAudit("user:a", "user", 1, "x")])


def test_array_and_dependencies(store: Store) -> None:
    first = one(store)
    ids = store.add_jobs(
        [NewJob(spec(), 1.0, depends_on=(("afterok", first),), array_index=i) for i in range(3)]
    )
    rows = [store.job(i) for i in ids]
    assert [(r.array_id, r.array_index) for r in rows if r] == [
        (ids[0], 0),
        (ids[0], 1),
        (ids[0], 2),
    ]
    assert all(r is not None and r.depends_on == (("afterok", first),) for r in rows)


def test_arrays_of_one_batch_by_group_and_their_throttle(store: Store) -> None:
    ids = store.add_jobs(
        [NewJob(spec(), 1.0, array_index=i, array_limit=2) for i in range(3)]
        + [NewJob(spec(), 1.0, array_index=i, array_group=1) for i in range(2)]
    )
    rows = [store.job(i) for i in ids]
    assert [(r.array_id, r.array_index, r.array_limit) for r in rows if r] == [
        (ids[0], 0, 2),
        (ids[0], 1, 2),
        (ids[0], 2, 2),
        (ids[3], 0, None),
        (ids[3], 1, None),
    ]
    # what a restarted controller is given back
    restored = [r.to_restored() for r in rows if r]
    assert [(x.array_id, x.array_limit) for x in restored] == [(ids[0], 2)] * 3 + [(ids[3], 0)] * 2
    with pytest.raises(StoreError, match=r"jobs\[0\]: array_limit must be >= 1"):
        store.add_jobs([NewJob(spec(), 1.0, array_index=0, array_limit=0)])
    with pytest.raises(StoreError, match=r"jobs\[0\]: array_limit must be >= 1, on an array"):
        store.add_jobs([NewJob(spec(), 1.0, array_limit=3)])


def test_idempotency_key_gives_back_the_first_job(store: Store) -> None:
    a = store.add_jobs([NewJob(spec(), 1.0, idempotency_key="sub-1")])
    # a client retrying after a timeout: same key, same job, nothing new stored
    b = store.add_jobs(
        [NewJob(spec(), 2.0, idempotency_key="sub-1"), NewJob(spec(), 2.0, idempotency_key="sub-2")]
    )
    assert a == ["1"] and b == ["1", "2"]
    twice = store.add_jobs(
        [NewJob(spec(), 3.0, idempotency_key="sub-3"), NewJob(spec(), 3.0, idempotency_key="sub-3")]
    )
    assert twice == ["3", "3"]
    assert len(store.list_jobs()) == 3
    assert one(store) == "4"  # the ids reserved for known keys were given back: no gaps
    with pytest.raises(IdempotencyConflict, match="sub-1"):
        store.add_jobs([NewJob(spec("mallory"), 4.0, idempotency_key="sub-1")])
    with pytest.raises(IdempotencyConflict):
        store.add_jobs([NewJob(spec(workers=9), 4.0, idempotency_key="sub-1")])
    assert len(store.list_jobs()) == 4


def test_ids_are_unique_across_two_stores(db_url: str) -> None:
    stores = [Store.open(db_url), Store.open(db_url)]
    got: list[list[str]] = [[], []]
    errors: list[BaseException] = []

    def submit(k: int) -> None:
        try:
            for b in range(25):
                keys = [f"s{k}-b{b}-{i}" for i in range(4)]
                got[k] += stores[k].add_jobs([NewJob(spec(), b, idempotency_key=x) for x in keys])
        except BaseException as e:  # surfaced in the main thread below
            errors.append(e)

    threads = [threading.Thread(target=submit, args=(k,)) for k in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors
    ids = got[0] + got[1]
    assert len(ids) == 200 and len(set(ids)) == 200
    assert len(stores[0].list_jobs(limit=None)) == 200
    for s in stores:
        s.close()


def test_list_jobs_filters_and_pages(store: Store) -> None:
    ids = [one(store, u, queue=q) for u, q in [("a", "x"), ("b", "x"), ("a", "y"), ("a", "x")]]
    assert [j.id for j in store.list_jobs(user="a")] == [ids[0], ids[2], ids[3]]
    assert [j.id for j in store.list_jobs(queue="x", user="a")] == [ids[0], ids[3]]
    assert [j.id for j in store.list_jobs(limit=2, after=ids[0])] == ids[1:3]
    store.apply_transitions([Transition(ids[1], 1, S.PENDING, S.STARTING, 5.0)])
    assert [j.id for j in store.list_jobs(state=S.STARTING)] == [ids[1]]
    assert len(store.list_jobs(state=[S.PENDING, S.STARTING])) == 4
    assert store.job("nope") is None


# ----- transitions and restart --------------------------------------------------------------


def test_transitions_append_events_and_update_rows(store: Store) -> None:
    jid = one(store, t=1.0)
    alloc = (Placement("n1", (0, 1), 1000, 2000, 1024), Placement("n2", (3,), 500, 1000, 512))
    started = JobUpdate(jid, S.STARTING, 1, 0, 10.0, None, 0.0, 0.0, alloc)
    store.apply_transitions(
        [
            Transition(jid, 0, None, S.PENDING, 1.0, "submitted"),  # add_jobs recorded it
            Transition(jid, 1, S.PENDING, S.STARTING, 10.0, "attempt 1"),
        ],
        [started],
    )
    store.apply_transitions([Transition(jid, 1, S.STARTING, S.RUNNING, 11.0, "every rank")])
    row = store.job(jid)
    assert row is not None
    assert (row.state, row.attempt, row.start_time, row.allocation) == (S.RUNNING, 1, 10.0, alloc)
    ev = store.job_events(jid)
    assert [(e.old, e.new, e.attempt, e.time, e.why) for e in ev] == [
        (None, S.PENDING, 0, 1.0, "submitted"),
        (S.PENDING, S.STARTING, 1, 10.0, "attempt 1"),
        (S.STARTING, S.RUNNING, 1, 11.0, "every rank"),
    ]
    assert ev[0].seq < ev[1].seq < ev[2].seq


def test_a_job_of_several_queues_keeps_the_one_it_started_in(store: Store) -> None:
    # Slurm's -p a,b: the row's queue is the one the job started in, and a restart reads it
    jid = one(store, queue="a", queues=("a", "b"))
    store.apply_transitions([], [JobUpdate(jid, S.STARTING, 1, 0, 5.0, None, 0.0, 0.0)])
    row = store.job(jid)
    assert row is not None and row.spec.queue == "a"  # no queue given: unchanged
    up = JobUpdate(jid, S.STARTING, 1, 0, 5.0, None, 0.0, 0.0, queue="b")
    store.apply_transitions([], [up])
    row = store.job(jid)
    assert row is not None and (row.spec.queue, row.spec.queues) == ("b", ("a", "b"))
    assert [j.id for j in store.list_jobs(queue="b")] == [jid]
    (active,) = store.load_jobs_for_restart().jobs
    assert active.spec.partitions == ("b", "a")


def test_a_jobs_end_is_stored_and_read_back(store: Store) -> None:
    jid = one(store)
    assert store.job(jid).ended is None  # type: ignore[union-attr]
    end = JobEnd("TimeLimit", 0, 15)
    store.apply_transitions([], [JobUpdate(jid, S.TIMED_OUT, 1, 0, 5.0, 9.0, 0.0, 0.0, ended=end)])
    row = store.job(jid)
    assert row is not None and row.ended == end and row.to_job().ended == end


def test_transitions_of_an_unknown_job_apply_nothing(store: Store) -> None:
    jid = one(store)
    with pytest.raises(StoreError):
        store.apply_transitions(
            [
                Transition(jid, 1, S.PENDING, S.STARTING, 2.0),
                Transition("404", 1, S.PENDING, S.STARTING, 2.0),
            ]
        )
    with pytest.raises(StoreError, match="unknown job 405"):
        store.apply_transitions([], [JobUpdate("405", S.RUNNING, 1, 0, 1.0, None, 0.0, 0.0)])
    job = store.job(jid)
    assert job is not None and job.state is S.PENDING and len(store.job_events(jid)) == 1


def _set(store: Store, jid: str, state: JobState, *, retries_used: int = 0) -> None:
    store.apply_transitions([], [JobUpdate(jid, state, 1, retries_used, 5.0, None, 0.0, 0.0)])


def test_restart_load_returns_exactly_the_unfinished_jobs(store: Store) -> None:
    done = one(store)
    _set(store, done, S.SUCCEEDED)
    expected = []
    for state in (S.PENDING, S.STARTING, S.RUNNING, S.PREEMPTED, S.NODE_LOST):
        deps = (("afterany", done),) if state is S.PENDING else ()
        jid = store.add_jobs([NewJob(spec(), 0.0, depends_on=deps)])[0]
        _set(store, jid, state)
        expected.append(jid)
    for state in (S.CANCELLED, S.TIMED_OUT, S.SUCCEEDED):
        _set(store, one(store), state)
    retrying = store.add_jobs([NewJob(spec(max_retries=2), 0.0)])[0]
    _set(store, retrying, S.FAILED, retries_used=1)  # a retry remains: not finished
    expected.append(retrying)
    exhausted = store.add_jobs([NewJob(spec(max_retries=1), 0.0)])[0]
    _set(store, exhausted, S.FAILED, retries_used=1)
    store.upsert_node(NodeRecord(node_spec("n1")))
    store.put_queue(QueueSpec("vision", Resources(8000, 10**6, 10**6), 2.0, "research"))

    st = store.load_jobs_for_restart()
    assert [j.id for j in st.jobs] == sorted(expected, key=int)
    assert [j.id for j in st.dependencies] == [done]
    assert [n.name for n in st.nodes] == ["n1"] and [q.name for q in st.queues] == ["vision"]
    assert all(not j.finished for j in st.jobs) and st.dependencies[0].finished


# ----- nodes and queues ---------------------------------------------------------------------


def node_spec(name: str) -> NodeSpec:
    return NodeSpec(name, "H100-SXM", 8, 112_000, 2_097_152, "leaf-1", "pod-a", "h100", 8, ())


def test_nodes_register_heartbeat_and_log_events(store: Store) -> None:
    gpus = ({"uuid": "GPU-1", "model": "H100-SXM", "memory_mib": 81559, "nvlink": [1, 2]},)
    rec = NodeRecord(
        node_spec("n1"), "10.0.0.1:7000", {"zone": "a"}, driver_version="550.1", gpu_info=gpus
    )
    store.upsert_node(rec)
    assert store.node("n1") == rec
    store.heartbeats({"n1": 100.0, "ghost": 100.0})
    store.add_node_events([NodeEvent("n1", "drained", 101.0, "maintenance")])
    store.upsert_node(dataclasses.replace(rec, address="10.0.0.2:7000"))  # the agent restarts
    n = store.node("n1")
    assert n is not None and n.drained and n.address == "10.0.0.2:7000"
    assert n.last_heartbeat is None  # the new registration said so
    store.apply_transitions([], node_events=[NodeEvent("n1", "resumed", 102.0, "done")])
    n = store.node("n1")
    assert n is not None and not n.drained and n.why == "done"
    assert store.set_node("n1", healthy=False, why="XID 79") and not store.set_node("x", lost=True)
    assert [(e.what, e.why) for e in store.node_events("n1")] == [
        ("drained", "maintenance"),
        ("resumed", "done"),
    ]
    assert [e.what for e in store.node_events(limit=1)] == ["resumed"]
    assert [x.name for x in store.nodes()] == ["n1"]


def test_queue_crud(store: Store) -> None:
    q = QueueSpec("vision", Resources(64000, 900_000, 16_384_000), 1.5, "research", False, True)
    store.put_queue(q, now=1.0)
    store.put_queue(QueueSpec("nlp"), now=1.0)
    assert store.queue("vision") == q and [x.name for x in store.queues()] == ["nlp", "vision"]
    bigger = dataclasses.replace(q, quota=Resources(128000, 900_000, 16_384_000))
    store.put_queue(bigger, now=2.0)
    assert store.queue("vision") == bigger
    assert store.delete_queue("nlp") and not store.delete_queue("nlp")
    assert store.queue("nlp") is None


# ----- tokens and audit ---------------------------------------------------------------------


def _dump(store: Store) -> str:
    with store.engine.connect() as c:
        return "\n".join(
            repr(tuple(r))
            for t in ("tokens", "audit", "jobs")
            for r in c.execute(sa.text(f"SELECT * FROM {t}"))
        )


def test_tokens_are_hashed_and_revocable(store: Store) -> None:
    info, secret = store.create_token("alice-laptop", "user", user="alice", now=1.0)
    _, agent_secret = store.create_token("agent-n1", "agent", node="n1", now=1.0)
    store.create_token("root", "admin", now=1.0)
    assert secret.startswith("gf_") and len(secret) > 40
    assert secret not in _dump(store) and agent_secret not in _dump(store)
    got = store.verify_token(secret)
    assert got == info and got.role == "user" and got.user == "alice" and got.node is None
    agent = store.verify_token(agent_secret)
    assert agent is not None and agent.node == "n1"
    assert store.verify_token(secret + "x") is None and store.verify_token("") is None
    assert store.revoke_token("alice-laptop", now=2.0) and not store.revoke_token("alice-laptop")
    assert store.verify_token(secret) is None
    assert [t.name for t in store.tokens(include_revoked=False)] == ["agent-n1", "root"]
    assert [t.active for t in store.tokens()] == [False, True, True]
    with pytest.raises(StoreError, match="needs the user"):
        store.create_token("x", "user")
    with pytest.raises(StoreError, match="needs the node"):
        store.create_token("y", "agent")
    with pytest.raises(StoreError, match="role must be"):
        store.create_token("z", "root")
    with pytest.raises(StoreError, match="exists already"):
        store.create_token("root", "admin")


def test_audit_append_and_list(store: Store) -> None:
    s1 = store.audit("root", "admin", "queue.put", "queue/vision", {"gpus": 64}, time=1.0)
    s2 = store.audit("alice-laptop", "user", "job.cancel", "job/7", time=2.0)
    s3 = store.audit("root", "admin", "node.drain", "node/n1", {"why": "rma"}, time=3.0)
    assert s1 < s2 < s3
    log = store.audit_log()
    assert [(e.actor, e.action, e.target) for e in log] == [
        ("root", "queue.put", "queue/vision"),
        ("alice-laptop", "job.cancel", "job/7"),
        ("root", "node.drain", "node/n1"),
    ]
    assert log[0].detail == {"gpus": 64} and log[1].detail == {} and log[1].actor_role == "user"
    assert [e.seq for e in store.audit_log(actor="root")] == [s1, s3]
    assert [e.seq for e in store.audit_log(target="job/7")] == [s2]
    assert [e.seq for e in store.audit_log(after=s1, limit=1)] == [s2]
    assert [e.seq for e in store.audit_log(since=2.5)] == [s3]


# ----- accounting ---------------------------------------------------------------------------


def test_accounting_of_a_hand_worked_example(store: Store) -> None:
    # alice/vision: 2 workers x 4 GPUs = 8 GPUs, runs 100 → 3700 s: 8 GPU-hours
    a = store.add_jobs([NewJob(spec("alice", "vision", workers=2, gpus_per_worker=4), 0.0)])[0]
    # bob/nlp: half a GPU; attempt 1 runs 0 → 1800 (preempted), attempt 2 from 3600, still running
    b = store.add_jobs([NewJob(spec("bob", "nlp", gpu_milli=500), 0.0)])[0]
    # carol/vision: cancelled while pending, never ran
    c = store.add_jobs([NewJob(spec("carol", "vision", gpus_per_worker=2), 0.0)])[0]
    store.apply_transitions(
        [
            Transition(b, 1, S.PENDING, S.STARTING, 0.0),
            Transition(b, 1, S.STARTING, S.RUNNING, 10.0),
            Transition(a, 1, S.PENDING, S.STARTING, 100.0),
            Transition(a, 1, S.STARTING, S.RUNNING, 110.0),
            Transition(b, 1, S.RUNNING, S.PREEMPTED, 1800.0),
            Transition(b, 1, S.PREEMPTED, S.PENDING, 1800.0),
            Transition(c, 0, S.PENDING, S.CANCELLED, 2000.0),
            Transition(b, 2, S.PENDING, S.STARTING, 3600.0),
            Transition(a, 1, S.RUNNING, S.SUCCEEDED, 3700.0),
        ]
    )
    by_user = {u.key: u for u in store.accounting(0.0, 7200.0, "user")}
    assert set(by_user) == {"alice", "bob"}
    assert by_user["alice"].gpu_hours == pytest.approx(8.0)
    assert (by_user["alice"].attempts, by_user["alice"].jobs) == (1, 1)
    # bob: 0.5 GPU x (0.5 h + 1 h still running at `until`)
    assert by_user["bob"].gpu_hours == pytest.approx(0.75)
    assert (by_user["bob"].attempts, by_user["bob"].jobs) == (2, 1)
    # clipped to [1000, 2000): alice 1000 s x 8, bob 800 s x 0.5
    clipped = {u.key: u.gpu_hours for u in store.accounting(1000.0, 2000.0, "queue")}
    assert clipped == pytest.approx({"vision": 8000 / 3600, "nlp": 400 / 3600})
    assert store.accounting(4000.0, 5000.0, "queue")[0].gpu_hours == pytest.approx(
        0.5 * 1000 / 3600
    )
    assert store.accounting(-10.0, 0.0) == []
    with pytest.raises(ValueError, match="group_by"):
        store.accounting(0.0, 1.0, "team")  # type: ignore[arg-type]
    # the same jobs as the fairness-against-entitlement figure reads them
    spans = {(sp.queue, sp.gpus): sp for sp in store.job_spans(0.0, 7200.0)}
    assert set(spans) == {("vision", 8.0), ("nlp", 0.5), ("vision", 2.0)}
    assert list(spans["vision", 8.0].runs) == [(100.0, 3700.0)]
    assert spans["vision", 8.0].end == 3700.0
    assert sorted(spans["nlp", 0.5].runs) == [(0.0, 1800.0), (3600.0, 7200.0)]
    assert spans["nlp", 0.5].end is None
    assert not spans["vision", 2.0].runs and spans["vision", 2.0].end == 2000.0
    assert [sp.queue for sp in store.job_spans(4000.0, 5000.0)] == ["nlp"]
