"""The cluster's state as the scheduler reads it: nodes and their free capacity, the running
and pending jobs, each queue's usage, and the indexes a snapshot is made from.

Every cache here (the node views and the Workspace refreshed from them, the running tuple, the
sorted expected ends, the capacity) is invalidated by this class's own methods; callers say what
changed (``take``, ``free``, ``node_changed``, ``run``...) and never touch a cache."""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Mapping

from gpufleet.core.commands import NodeEvent
from gpufleet.core.pending import PendingBook
from gpufleet.core.state import NodeRuntime
from gpufleet.model.allocation import Allocation, Placement
from gpufleet.model.cluster import ClusterSpec
from gpufleet.model.queue import QueueSpec
from gpufleet.model.reservation import NodeReservation
from gpufleet.model.resources import MILLI, Resources
from gpufleet.scheduler.arrivals import ArrivalHistory
from gpufleet.scheduler.decisions import CycleResult
from gpufleet.scheduler.identity import Accounts
from gpufleet.scheduler.runtime_history import RuntimeHistory
from gpufleet.scheduler.snapshot import DefragMove, NodeView, PendingJob, RunningJob, Snapshot
from gpufleet.scheduler.start_errors import StartErrors
from gpufleet.scheduler.usage import DecayedUsage
from gpufleet.scheduler.workspace import Workspace


class ClusterState:
    def __init__(
        self, half_life_s: float, cluster: ClusterSpec | None = None, *, forecast: bool = False
    ) -> None:
        self.nodes: dict[str, NodeRuntime] = {}
        self.queues: dict[str, QueueSpec] = {}
        self.running: dict[str, RunningJob] = {}
        # the advance reservations by name (those that ended are dropped at the next change)
        self.reservations: dict[str, NodeReservation] = {}
        # the Unix accounts the nodes that run tasks as their owners found, by node and user
        self.accounts = Accounts()
        self.ledger = DecayedUsage(half_life_s)
        # the finished jobs' run times (the estimated starts' run-time predictor)
        self.history = RuntimeHistory()
        # the jobs submitted over the last hours (the estimated starts' forecast of arrivals,
        # Profile.plan_arrivals): kept only where the plan uses them, since a cluster taking
        # 200 jobs/s would otherwise hold millions of specs for nothing
        self.arrivals = ArrivalHistory(enabled=forecast)
        # how the estimated starts came out (their calibration and 80 % band)
        self.start_errors = StartErrors()
        # each leaf's last defragmentation move (the store keeps them too: ``DefragMoved``; a
        # restarted controller gets them back, ``Controller.restore``)
        self.defrag_moves: dict[str, DefragMove] = {}
        # something changed that a scheduling pass should see
        self.dirty = True
        self._pending = PendingBook()
        self._running_tuple: tuple[RunningJob, ...] | None = None
        # the running jobs with a time limit by (expected end, start order), for EASY's shadow
        # time; _end_keys and _ends side by side, so a snapshot's copy is one tuple()
        self._end_keys: list[tuple[float, int]] = []
        self._ends: list[tuple[float, Allocation]] = []
        self._end_key_of: dict[str, tuple[float, int]] = {}
        self._ends_tuple: tuple[tuple[float, Allocation], ...] | None = None
        self._run_seq = 0
        self._seq_of: dict[str, int] = {}  # each running job's start order
        self._node_views: tuple[NodeView, ...] | None = None
        self._workspace: Workspace | None = None  # Workspace(self._node_views), kept for cycles
        # the views in node order, and the nodes whose free capacity changed since they were
        # made (any other change makes them all anew)
        self._view_list: list[NodeView] | None = None
        self._view_pos: dict[str, int] = {}
        self._touched: set[str] = set()
        self._queue_used: dict[str, Resources] = {}
        self._capacity: Resources | None = None  # of the schedulable nodes; None: count again
        if cluster is not None:
            self.queues = {q.name: q for q in cluster.queues}
            for n in cluster.nodes:
                self.nodes[n.name] = NodeRuntime.of(n)

    # ----- nodes -------------------------------------------------------------------------

    def put_node(self, node: NodeRuntime) -> None:
        """A node new, back, or described anew (replacing the one of its name)."""
        self.nodes[node.spec.name] = node
        self.node_changed(node.spec.name)

    def drop_node(self, name: str) -> None:
        """The node leaves the cluster (an elastic pool released it): it runs nothing."""
        if self.nodes.pop(name, None) is not None:
            self._touched.discard(name)
            self.node_changed(name)
            self.dirty = True

    def node_changed(self, name: str) -> None:
        """The node changed in more than its free capacity (health, drain, suspicion...):
        every view is made anew, and the capacity counted again."""
        n = self.nodes.get(name)
        if n is not None:
            n.changed()
        self._node_views = None
        self._view_list = None
        self._capacity = None

    def take(self, p: Placement) -> None:
        n = self.nodes[p.node]
        for d in p.gpus:
            n.gpu_free[d] -= p.gpu_milli
        n.cpu_free -= p.cpu_milli
        n.mem_free -= p.memory_mib
        self._free_changed(n)

    def free(self, p: Placement) -> None:
        n = self.nodes.get(p.node)
        if n is None or n.lost:
            return  # a lost node comes back empty
        for d in p.gpus:
            n.gpu_free[d] = min(MILLI, n.gpu_free[d] + p.gpu_milli)
        n.cpu_free = min(n.spec.cpu_milli, n.cpu_free + p.cpu_milli)
        n.mem_free = min(n.spec.memory_mib, n.mem_free + p.memory_mib)
        self._free_changed(n)

    def _free_changed(self, n: NodeRuntime) -> None:
        n.changed()
        self._node_views = None
        self._touched.add(n.spec.name)

    def suspect(self, name: str, why: str, now: float) -> NodeEvent | None:
        """Nothing is placed on the node until it is trusted again; the event, if it was not
        suspect already."""
        node = self.nodes.get(name)
        if node is None or node.lost or node.suspect:
            return None
        node.suspect = True
        if node.healthy and not node.drained:  # an admin's or a health drain says more
            node.why = why
        self.node_changed(name)
        return NodeEvent(name, "suspect", now, why)

    def trust(self, name: str, why: str, now: float) -> NodeEvent | None:
        node = self.nodes.get(name)
        if node is None or not node.suspect:
            return None
        node.suspect = False
        if node.healthy and not node.drained:
            node.why = why
        self.node_changed(name)
        self.dirty = True
        return NodeEvent(name, "trusted", now, why)

    @property
    def capacity(self) -> Resources:
        if self._capacity is None:
            cap = Resources()
            for n in self.nodes.values():
                if n.schedulable:
                    cap = cap + Resources(n.spec.gpus * MILLI, n.spec.cpu_milli, n.spec.memory_mib)
            self._capacity = cap
        return self._capacity

    # ----- running jobs ------------------------------------------------------------------

    def run(self, view: RunningJob) -> None:
        self.unrun(view.id)
        self.running[view.id] = view
        self._running_tuple = None
        self._run_seq += 1
        self._seq_of[view.id] = self._run_seq
        end = view.expected_end
        if end is not None:
            key = (end, self._run_seq)
            i = bisect.bisect_left(self._end_keys, key)
            self._end_keys.insert(i, key)
            self._ends.insert(i, (end, view.allocation))
            self._end_key_of[view.id] = key
            self._ends_tuple = None

    def restate(self, view: RunningJob) -> None:
        """A running job's view changed (ranks exited, its stop began), its start order kept:
        in ``running`` and among the expected ends, where ties go by start order."""
        old = self.running.get(view.id)
        if old is None:
            return
        self.running[view.id] = view  # an existing key keeps its place
        self._running_tuple = None
        key = self._end_key_of.pop(view.id, None)
        if key is not None:
            i = bisect.bisect_left(self._end_keys, key)
            del self._end_keys[i]
            del self._ends[i]
        end = view.expected_end
        if end is not None:
            key = (end, self._seq_of[view.id])
            i = bisect.bisect_left(self._end_keys, key)
            self._end_keys.insert(i, key)
            self._ends.insert(i, (end, view.allocation))
            self._end_key_of[view.id] = key
        self._ends_tuple = None

    def unrun(self, job_id: str) -> None:
        if self.running.pop(job_id, None) is None:
            return
        del self._seq_of[job_id]
        self._running_tuple = None
        key = self._end_key_of.pop(job_id, None)
        if key is not None:
            i = bisect.bisect_left(self._end_keys, key)
            del self._end_keys[i]
            del self._ends[i]
            self._ends_tuple = None

    def running_on(self, node: str) -> list[str]:
        """The running jobs with a rank placed on ``node``, in start order."""
        return [jid for jid, r in self.running.items() if any(p.node == node for p in r.allocation)]

    # ----- pending jobs ------------------------------------------------------------------

    def put_pending(self, view: PendingJob) -> None:
        """Pend the job, or replace its pending view."""
        self._pending.put(view)

    def unpend(self, job_id: str) -> bool:
        """No longer pending; False if it was not."""
        return self._pending.remove(job_id)

    def is_pending(self, job_id: str) -> bool:
        return job_id in self._pending

    def pending_jobs(self) -> tuple[PendingJob, ...]:
        """Every pending job's view, by (submit time, seq)."""
        return self._pending.jobs()

    @property
    def pending_count(self) -> int:
        return len(self._pending)

    def pending_ids(self) -> Iterator[str]:
        return iter(self._pending)

    # ----- queue usage -------------------------------------------------------------------

    def use(self, queue: str, r: Resources) -> None:
        self._queue_used[queue] = self._queue_used.get(queue, Resources()) + r

    def unuse(self, queue: str, r: Resources) -> None:
        self._queue_used[queue] = (self._queue_used.get(queue, Resources()) - r).clamp0()

    def queue_used(self, queue: str) -> Resources:
        return self._queue_used.get(queue, Resources())

    def dominant_shares(self) -> dict[str, float]:
        c = self.capacity
        out = {}
        for q, u in self._queue_used.items():
            out[q] = max(
                u.gpu_milli / c.gpu_milli if c.gpu_milli else 0.0,
                u.cpu_milli / c.cpu_milli if c.cpu_milli else 0.0,
                u.memory_mib / c.memory_mib if c.memory_mib else 0.0,
            )
        return out

    def advance_usage(self, now: float) -> None:
        led = self.ledger
        if (
            led.last is not None
            and now <= led.last
            and led.values.keys() >= self._queue_used.keys()
        ):
            return  # no time passed and no new queue in use: the advance would change nothing
        led.advance(now, self.dominant_shares())

    def moved(
        self,
        res: CycleResult,
        now: float,
        replacing: set[str] | None = None,
        attempts: Mapping[str, int] | None = None,
    ) -> list[DefragMove]:
        """The defragmentation moves of a cycle (its preemptions with a ``domain``), kept and
        returned; ``replacing``: the victims that stop once their replacements are ready;
        ``attempts``: each victim's attempt."""
        victims: dict[tuple[str, str], list[str]] = {}
        for pre in res.preemptions:
            if pre.domain:
                victims.setdefault((pre.domain, pre.for_job), []).append(pre.job_id)
        made = []
        for (leaf, job), ids in victims.items():
            r = res.reasons.raw(job)
            msg, data = ("", {}) if r is None else (r.message, dict(r.data))
            waits = tuple(i for i in ids if i in (replacing or ()))
            tries = tuple((attempts or {}).get(i, 0) for i in ids)
            move = DefragMove(leaf, now, job, tuple(ids), msg, data, waits, tries)
            self.defrag_moves[leaf] = move
            made.append(move)
        return made

    # ----- the scheduler's view ----------------------------------------------------------

    def snapshot(self, now: float, cycle: int) -> Snapshot:
        if self._node_views is None:
            changed: list[int] | None = None
            if self._view_list is None:
                self._view_list = [n.view() for n in self.nodes.values()]
                self._view_pos = {name: i for i, name in enumerate(self.nodes)}
            else:
                changed = []
                for name in self._touched:
                    i = self._view_pos[name]
                    self._view_list[i] = self.nodes[name].view()
                    changed.append(i)
            self._touched.clear()
            self._node_views = tuple(self._view_list)
            self._workspace = Workspace.refreshed(self._workspace, self._node_views, changed)
        if self._running_tuple is None:
            self._running_tuple = tuple(self.running.values())
        if self._ends_tuple is None:
            self._ends_tuple = tuple(self._ends)
        return Snapshot(
            now,
            self._node_views,
            self._running_tuple,
            self._pending.jobs(),
            self.queues,
            self.ledger.values,
            cycle,
            {
                q: r
                for q, r in self._queue_used.items()
                if r.gpu_milli or r.cpu_milli or r.memory_mib
            },
            self.capacity,
            self._workspace,
            self._pending.index(),
            self._ends_tuple,
            tuple(r for r in self.reservations.values() if r.end > now),
            self.accounts if self.accounts else None,
            history=self.history,
            arrivals=self.arrivals,
            start_errors=self.start_errors,
            defrag_moves=self.defrag_moves,
        )
