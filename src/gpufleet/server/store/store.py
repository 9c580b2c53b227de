"""The controller's durable store: the store is the truth (DESIGN.md, reliability rules).
Every method is one transaction. Writes that the server batches (``add_jobs``,
``apply_transitions``) go down as executemany, so a group commit costs one fsync."""

from __future__ import annotations

import time as _time
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa

from gpufleet.core.commands import NodeEvent, ReplicaAdded, ServiceEvent, ServiceRecord, Transition
from gpufleet.model.job import JobState
from gpufleet.model.queue import QueueSpec
from gpufleet.model.reservation import NodeReservation
from gpufleet.scheduler.entitlement import Span
from gpufleet.server.store import accounting as _accounting
from gpufleet.server.store import auth, defrag, fairshare, gpuuse, jobs, leader, nodes, reservations
from gpufleet.server.store import fairness as _fairness
from gpufleet.server.store import secrets as _secrets
from gpufleet.server.store import services as _services
from gpufleet.server.store.accounting import GroupBy
from gpufleet.server.store.bodies import Bodies
from gpufleet.server.store.counters import CounterStore
from gpufleet.server.store.endpoints import EndpointStore
from gpufleet.server.store.engine import WRITE, make_engine, upgrade
from gpufleet.server.store.nodeops import NodeOpsStore
from gpufleet.server.store.records import (
    AuditEntry,
    JobEvent,
    JobUpdate,
    NewJob,
    NodeEventRecord,
    NodeRecord,
    RestartState,
    StoredJob,
    StoreError,
    StoreUnavailable,
    SubmitAudit,
    TokenInfo,
    Usage,
)

# an audit entry that commits with the change it records: (actor, role, action, target, detail)
AuditRow = tuple[str, str, str, str, Mapping[str, Any]]


class Store(NodeOpsStore, EndpointStore, CounterStore):
    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine
        # the leader's epoch (high availability, ADR 0032): every write transaction checks it
        # first and holds it until its commit; None: one controller, nothing to check
        self.fence_epoch: int | None = None

    @classmethod
    def open(cls, url: str, *, migrate: bool = True) -> Store:
        """Connect (``sqlite:///path`` or ``postgresql://…``) and bring the schema to head."""
        engine = make_engine(url)
        if migrate:
            upgrade(engine)
        return cls(engine)

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    @contextmanager
    def _write(self) -> Iterator[sa.Connection]:
        try:
            with self.engine.connect().execution_options(**WRITE) as c, c.begin():
                if self.fence_epoch is not None:
                    leader.check(c, self.fence_epoch)
                yield c
        except (sa.exc.IntegrityError, sa.exc.DataError) as e:  # constraints, too-long text
            raise StoreError(f"refused by the database: {e.orig}") from e
        except _OUTAGES as e:
            raise _unavailable(e) from e

    @contextmanager
    def _read(self, snapshot: bool = False) -> Iterator[sa.Connection]:
        """A read transaction; ``snapshot``: one view for all its statements (SQLite's
        transactions always are; PostgreSQL's default READ COMMITTED is per statement)."""
        try:
            with self.engine.connect() as c:
                if snapshot and c.dialect.name == "postgresql":
                    c.execution_options(isolation_level="REPEATABLE READ")
                with c.begin():
                    if self.fence_epoch is not None and c.dialect.name == "postgresql":
                        # a read holds no lock a takeover waits for: the idle timeout that
                        # ends a frozen leader's write (leader.idle_timeout) must not end a
                        # new leader's read back of the store on a busy host
                        c.exec_driver_sql("SET LOCAL idle_in_transaction_session_timeout = 0")
                    yield c
        except _OUTAGES as e:
            raise _unavailable(e) from e

    def probe(self) -> None:
        """Whether the store takes writes again (a full disk still reads): a transaction that
        writes a few pages, as a turn does, and leaves nothing. StoreUnavailable when it
        cannot. (A no-op UPDATE is no test: SQLite commits one on a full disk.)"""
        with self._write() as c:
            fairshare.probe(c)

    # ----- jobs ----------------------------------------------------------------------------

    def add_jobs(
        self,
        new: Sequence[NewJob],
        now: float | None = None,
        *,
        audits: Sequence[SubmitAudit] = (),
        known: set[str] | None = None,
    ) -> list[str]:
        """Store a batch all or nothing; the ids in input order (a key seen before gives back
        its job's id, added to ``known`` where given, and stores nothing new). ``audits``, in
        batch order, say who submitted which jobs: their ``job.submit`` entries too."""
        if sum(a.count for a in audits) not in (0, len(new)):
            raise ValueError(f"audits cover {sum(a.count for a in audits)} of {len(new)} jobs")
        t, specs = _now(now), jobs.encode_specs(new)  # before the transaction: no lock held
        with self._write() as c:
            ids = jobs.add_jobs(c, new, t, known, specs)
            rows, k = [], 0
            for a in audits:
                mine = ids[k : k + a.count]
                k += a.count
                detail = {"count": a.count, "name": a.name}
                rows.append((a.actor, a.actor_role, "job.submit", ",".join(mine[:20]), detail))
            auth.add_audits(c, t, rows)
            return ids

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
        defrag_moves: Sequence[defrag.DefragMoved] = (),
    ) -> None:
        """Make a batch of the controller's commands durable, in one transaction, before the
        commands after them are carried out; ``audits`` (actor, role, action, target, detail):
        the requests that caused them (an action and its audit entry commit together);
        ``replicas``: new replica jobs (before their Transitions to PENDING); ``services``:
        each changed service's record (None: gone); ``defrag_moves``: each leaf's last move."""
        with self._write() as c:
            _services.add_replicas(c, replicas, _now(time))
            jobs.apply_transitions(c, transitions, job_updates)
            nodes.add_node_events(c, node_events)
            _services.put_records(c, services, _now(time))
            _services.add_events(c, service_events)
            defrag.put(c, defrag_moves)
            auth.add_audits(c, _now(time), audits)

    def job(self, job_id: str) -> StoredJob | None:
        with self._read() as c:
            return jobs.job(c, job_id)

    def list_jobs(
        self,
        *,
        user: str | None = None,
        queue: str | None = None,
        state: JobState | Collection[JobState] | None = None,
        limit: int | None = 100,
        after: str | None = None,
        newest_first: bool = False,
        max_seq: int | None = None,
    ) -> list[StoredJob]:
        """Jobs in submission order (or newest first), after job ``after``, up to ``max_seq``."""
        with self._read() as c:
            return jobs.list_jobs(
                c,
                user=user,
                queue=queue,
                state=state,
                limit=limit,
                after=after,
                newest_first=newest_first,
                max_seq=max_seq,
            )

    def job_events(self, job_id: str) -> list[JobEvent]:
        with self._read() as c:
            return jobs.events(c, job_id)

    def load_jobs_for_restart(self, known: Bodies | None = None) -> RestartState:
        with self._read(snapshot=True) as c:
            active, deps = jobs.unfinished(c, known)  # known: read ahead (ADR 0059)
            return RestartState(
                tuple(active),
                tuple(deps),
                tuple(nodes.all_nodes(c)),
                tuple(nodes.all_queues(c)),
                tuple(r.record for r in _services.all_services(c)),
                tuple(defrag.all_moves(c)),
            )

    def save_fairshare_usage(self, values: Mapping[str, float], as_of: float) -> None:
        """The fair-share ledger: each queue's decayed past usage (share·s) as of a time."""
        with self._write() as c:
            fairshare.save(c, values, as_of)

    def fairshare_usage(self) -> tuple[dict[str, float], float | None]:
        """The saved ledger and its time (None: never saved)."""
        with self._read() as c:
            return fairshare.load(c)

    # ----- services ------------------------------------------------------------------------

    def services(self, *, user: str | None = None) -> list[_services.ServiceRow]:
        with self._read() as c:
            return _services.all_services(c, user)

    def service(self, name: str) -> _services.ServiceRow | None:
        with self._read() as c:
            return _services.service(c, name)

    def service_events(
        self, name: str, limit: int | None = 50
    ) -> list[_services.ServiceEventRecord]:
        """The newest ``limit`` events of a service (kept after it is gone), oldest first."""
        with self._read() as c:
            return _services.events(c, name, limit)

    def service_next_index(self, name: str) -> int:
        """The first replica number free for a (new) service of this name."""
        with self._read() as c:
            return _services.next_index(c, name)

    # ----- nodes ---------------------------------------------------------------------------

    def upsert_node(self, node: NodeRecord) -> None:
        """Register or re-register a node; an existing row keeps its ``drained`` flag."""
        with self._write() as c:
            nodes.upsert_node(c, node)

    def heartbeats(self, beats: Mapping[str, float]) -> None:
        """Last heartbeat time per node name, for many nodes at once."""
        with self._write() as c:
            nodes.heartbeats(c, beats)

    def set_node(
        self,
        name: str,
        *,
        healthy: bool | None = None,
        drained: bool | None = None,
        lost: bool | None = None,
        why: str | None = None,
    ) -> bool:
        """Change a node's flags; False when no such node is stored."""
        given = {"healthy": healthy, "drained": drained, "lost": lost, "why": why}
        with self._write() as c:
            return nodes.set_node(c, name, {k: v for k, v in given.items() if v is not None})

    def add_node_events(self, events: Sequence[NodeEvent]) -> None:
        """Append to the node log; "lost", "drained", "resumed", "(un)healthy" set the flags."""
        with self._write() as c:
            nodes.add_node_events(c, events)

    def node(self, name: str) -> NodeRecord | None:
        with self._read() as c:
            return nodes.node(c, name)

    def nodes(self) -> list[NodeRecord]:
        with self._read() as c:
            return nodes.all_nodes(c)

    def node_events(
        self, name: str | None = None, limit: int | None = 100
    ) -> list[NodeEventRecord]:
        """The newest ``limit`` events (of one node, or all), oldest first."""
        with self._read() as c:
            return nodes.events(c, name, limit)

    # ----- queues --------------------------------------------------------------------------

    def put_queue(
        self, spec: QueueSpec, *, now: float | None = None, audit: AuditRow | None = None
    ) -> None:
        """``audit`` (actor, role, action, target, detail): committed with the change."""
        with self._write() as c:
            nodes.put_queue(c, spec, _now(now))
            auth.add_audits(c, _now(now), [audit] if audit else [])

    def delete_queue(self, name: str) -> bool:
        with self._write() as c:
            return nodes.delete_queue(c, name)

    def queue(self, name: str) -> QueueSpec | None:
        with self._read() as c:
            return nodes.queue(c, name)

    def queues(self) -> list[QueueSpec]:
        with self._read() as c:
            return nodes.all_queues(c)

    # ----- reservations (each change committed with its audit entry) ---------------------

    def put_reservation(self, r: NodeReservation, *, now: float, audit: AuditRow) -> None:
        with self._write() as c:
            reservations.put(c, r, now)
            auth.add_audits(c, now, [audit])

    def delete_reservation(self, name: str, *, now: float, audit: AuditRow) -> bool:
        with self._write() as c:
            auth.add_audits(c, now, [audit])
            return reservations.delete(c, name)

    def reservations(self) -> list[NodeReservation]:
        with self._read() as c:
            return reservations.all_reservations(c)

    # ----- tokens and audit ----------------------------------------------------------------

    def create_token(
        self,
        name: str,
        role: str,
        user: str | None = None,
        node: str | None = None,
        now: float | None = None,
        *,
        audit: AuditRow | None = None,
    ) -> tuple[TokenInfo, str]:
        """A new token and its secret; the secret is shown once and never stored. ``audit``
        (actor, role, action, target, detail): committed with the token."""
        with self._write() as c:
            made = auth.create_token(c, name, role, user, node, _now(now))
            auth.add_audits(c, _now(now), [audit] if audit else [])
            return made

    def has_admin_token(self) -> bool:
        """Whether an active admin token exists (the server makes the first one at start)."""
        with self._read() as c:
            return auth.has_admin(c)

    def verify_token(self, secret: str) -> TokenInfo | None:
        with self._read() as c:
            return auth.verify_token(c, secret)

    def revoke_token(self, name: str, *, now: float | None = None) -> bool:
        """False: no active token of that name; LastAdminToken: it is the last admin's."""
        with self._write() as c:
            return auth.revoke_token(c, name, _now(now))

    def create_admin_token(
        self, base: str = "admin", now: float | None = None
    ) -> tuple[TokenInfo, str]:
        """An admin token named ``base`` or, if a (revoked) token has that name, the first
        free ``base-N``: the controller's bootstrap must always succeed."""
        with self._write() as c:
            return auth.create_token(c, auth.free_name(c, base), "admin", None, None, _now(now))

    def active_tokens(self) -> list[tuple[str, TokenInfo]]:
        with self._read() as c:
            return auth.active_tokens(c)

    def tokens(self, *, include_revoked: bool = True) -> list[TokenInfo]:
        with self._read() as c:
            return auth.list_tokens(c, include_revoked)

    def audit(
        self,
        actor: str,
        actor_role: str,
        action: str,
        target: str,
        detail: Mapping[str, Any] | None = None,
        *,
        time: float | None = None,
    ) -> int:
        """Append to the audit log; its sequence number."""
        with self._write() as c:
            return auth.add_audit(c, _now(time), actor, actor_role, action, target, detail or {})

    def audit_log(
        self,
        *,
        actor: str | None = None,
        target: str | None = None,
        since: float | None = None,
        after: int | None = None,
        limit: int | None = 100,
        newest_first: bool = False,
    ) -> list[AuditEntry]:
        """Entries oldest first (or newest first); ``after`` a sequence number pages on."""
        with self._read() as c:
            return auth.audit_log(
                c,
                actor=actor,
                target=target,
                since=since,
                after=after,
                limit=limit,
                newest_first=newest_first,
            )

    # ----- job secrets (sealed values only: server/secrets.py seals and opens them) ---------

    def put_secret(
        self,
        info: _secrets.SecretInfo,
        key_id: str,
        nonce: bytes,
        ciphertext: bytes,
        *,
        replace: bool = False,
        audit: AuditRow | None = None,
    ) -> bool:
        """True: new; False: it replaced one (``replace``); SecretExists otherwise; ``audit``."""
        with self._write() as c:
            new = _secrets.put(c, info, key_id, nonce, ciphertext, replace=replace)
            auth.add_audits(c, info.updated_time, [audit] if audit else [])
            return new

    def secret(self, scope: str, owner: str, name: str) -> _secrets.SealedRow | None:
        with self._read() as c:
            return _secrets.get(c, scope, owner, name)

    def secret_rows(
        self, keys: Collection[tuple[str, str, str]]
    ) -> dict[tuple[str, str, str], _secrets.SealedRow]:
        """The sealed rows of these (scope, owner, name) that exist, in one read."""
        with self._read() as c:
            return _secrets.get_many(c, keys)

    def secrets_exist(self, keys: Collection[tuple[str, str, str]]) -> set[tuple[str, str, str]]:
        """Which of these (scope, owner, name) exist."""
        with self._read() as c:
            return _secrets.exists(c, keys)

    def secrets(
        self, *, scope: str | None = None, owners: Collection[str] | None = None
    ) -> list[_secrets.SecretInfo]:
        with self._read() as c:
            return _secrets.listing(c, scope=scope, owners=owners)

    def delete_secret(
        self, scope: str, owner: str, name: str, *, now: float, audit: AuditRow | None = None
    ) -> bool:
        with self._write() as c:
            gone = _secrets.delete(c, scope, owner, name)
            if gone:
                auth.add_audits(c, now, [audit] if audit else [])
            return gone

    def secrets_used(
        self, keys: Collection[tuple[str, str, str]], audits: Sequence[AuditRow], now: float
    ) -> None:
        """Their last use, and who used which for which job (never a value), in one commit."""
        with self._write() as c:
            _secrets.used(c, keys, now)
            auth.add_audits(c, now, audits)

    # ----- accounting ----------------------------------------------------------------------

    def accounting(self, since: float, until: float, group_by: GroupBy = "user") -> list[Usage]:
        """GPU-hours per user or queue in ``[since, until)``, most first."""
        with self._read() as c:
            return _accounting.accounting(c, since, until, group_by)

    def job_spans(self, since: float, until: float) -> list[Span]:
        """The jobs that wanted GPUs in ``[since, until)``, for the entitlement figure."""
        with self._read() as c:
            return _fairness.spans(c, since, until)

    def add_gpu_use(self, used: Mapping[gpuuse.UseKey, float]) -> None:
        with self._write() as c:
            gpuuse.add(c, used)

    def gpu_used_hours(self, since: float, until: float, group_by: GroupBy) -> dict[str, float]:
        with self._read() as c:
            return gpuuse.used_hours(c, since, until, group_by)


# What a database that is down, unreachable or out of disk raises (after the refusals above,
# DatabaseErrors too): 503 and retried, never 500; OSError: SQLite's directory gone, unwritable.
_OUTAGES = (sa.exc.DBAPIError, sa.exc.DisconnectionError, sa.exc.TimeoutError, OSError)


def _unavailable(e: BaseException) -> StoreUnavailable:
    why = getattr(e, "orig", None) or e
    first = (str(why).strip().splitlines() or [type(why).__name__])[0]
    return StoreUnavailable(f"the database is unavailable: {first}")


def _now(t: float | None) -> float:
    return _time.time() if t is None else t
