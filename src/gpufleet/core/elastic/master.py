"""The elastic pools inside the core: their nodes' power states (``book.py``), the decisions
after each scheduling cycle (``decide.py``) and what follows from the nodes' own events.

- After a cycle, in the same step: the pools grow for the jobs the cycle could not place
  (``PowerUp``; those jobs' Reasons say so), top up to their ``min`` and release the nodes
  idle past ``suspend_after_s`` (``PowerDown``; the node leaves the cluster state at once, so
  nothing is placed on it meanwhile).
- A node powering up that registers is up; one that does not within ``resume_timeout_s``, or
  whose provider fails (``PowerFailed``), is failed and released; the jobs that waited on it
  are grown for again elsewhere at the next cycle (none ran there: nothing is placed on a node
  before it registers).
- An up node that is lost has its jobs requeued as any lost node, then is powered down: its
  machine is gone, a later resume asks for a fresh one.

Timers (``SetTimer(kind="elastic", job_id=node)``) wake the core at a resume deadline, at the
end of a powering down and when an idle node's time is up: the simulator, which moves only
at events, releases nodes when the live controller would."""

from __future__ import annotations

from collections.abc import Iterable

from gpufleet.core.cluster_state import ClusterState
from gpufleet.core.commands import Command, NodeEvent, PowerDown, PowerUp, SetTimer
from gpufleet.core.elastic.book import SUSPEND_TIMEOUT_S, ElasticBook, ElasticNode, Power
from gpufleet.core.elastic.decide import Growth, QuotaRoom, plan_growth, to_release, to_top_up
from gpufleet.model.elastic import ElasticPool
from gpufleet.model.reason import Reason, ReasonCode
from gpufleet.model.resources import MILLI
from gpufleet.scheduler.decisions import CycleResult
from gpufleet.scheduler.framework import PlacePlugin

TIMER = "elastic"


class ElasticMaster:
    def __init__(self, state: ClusterState, pools: Iterable[ElasticPool]) -> None:
        self.state = state
        self.book = ElasticBook(pools)
        self._timers: dict[str, float] = {}  # the idle timer set per node
        # the jobs the pools grow for, as of the last decision: job → nodes not up yet
        self.waiting_on: dict[str, tuple[str, ...]] = {}

    @property
    def enabled(self) -> bool:
        return bool(self.book.nodes)

    @property
    def can_grow(self) -> bool:
        return any(n.power is Power.DOWN for n in self.book.nodes.values())

    # ----- the nodes' own events ---------------------------------------------------------

    def restored(self, now: float) -> None:
        """After a restart: the pools' nodes the store knew are up (held until their agents
        return, or lost)."""
        for name in self.state.nodes:
            n = self.book.get(name)
            if n is not None:
                self.book.move(n, Power.UP, now, "restored")

    def registering(self, name: str, now: float, out: list[Command]) -> bool:
        """Whether a registration of ``name`` is taken: not while it is being powered down
        (its agent's last words). Any other of the pools' nodes is up from now."""
        n = self.book.get(name)
        if n is None:
            return True
        if n.power is Power.SUSPENDING and now < n.until:
            return False
        if n.power is not Power.UP:
            took = f" after {now - n.since:.0f} s" if n.power is Power.RESUMING else ""
            out.append(NodeEvent(name, "powered_up", now, f"registered{took}"))
            self.book.move(n, Power.UP, now, "registered")
        return True

    def lost(self, name: str, now: float, out: list[Command]) -> None:
        """After ``NodeLifecycle.lost`` requeued its jobs: an elastic node is powered down."""
        n = self.book.get(name)
        if n is None or n.power is not Power.UP:
            return
        self._release([n], now, f"lost: {self.state.nodes[name].why}", out, Power.DOWN)

    def failed(self, name: str, why: str, now: float, out: list[Command]) -> None:
        """Its provider failed, or it did not register in time (Slurm's ResumeTimeout)."""
        n = self.book.get(name)
        if n is None or n.power is not Power.RESUMING:
            return
        out.append(NodeEvent(name, "power_failed", now, why))
        pool = self.book.pools[n.pool]
        self.book.move(n, Power.FAILED, now, why)
        out.append(PowerDown(n.pool, pool.spec.provider, (name,), f"failed: {why}"))
        self.state.dirty = True  # its jobs are grown for elsewhere

    def admin_resume(self, name: str, now: float, out: list[Command]) -> bool:
        """An admin's resume of a failed node: the pool may resume it again."""
        n = self.book.get(name)
        if n is None or n.power is not Power.FAILED:
            return False
        self.book.move(n, Power.DOWN, now, "resumed by admin")
        out.append(NodeEvent(name, "resumed", now, "powered down, may be resumed again"))
        self.state.dirty = True
        return True

    def timer(self, name: str, now: float, out: list[Command]) -> None:
        n = self.book.get(name)
        if n is None:
            return
        if n.power is Power.RESUMING and now >= n.until:
            timeout = self.book.pools[n.pool].spec.resume_timeout_s
            self.failed(name, f"not registered within resume_timeout_s ({timeout:g} s)", now, out)
        elif n.power is Power.SUSPENDING and now >= n.until:
            self.book.move(n, Power.DOWN, now, n.why)
            out.append(NodeEvent(name, "powered_down", now, n.why))
        else:
            self._timers.pop(name, None)
            self.state.dirty = True  # an idle node's time may be up: a pass decides

    # ----- the decision after each cycle ---------------------------------------------------

    def after_cycle(
        self, now: float, cycle: int, res: CycleResult, place: PlacePlugin, out: list[Command]
    ) -> None:
        if not self.enabled:
            return
        self._track_idle(now, out)
        coming = [n.spec for n in self.book.in_state(Power.RESUMING)]
        down = [n.spec for n in self.book.in_state(Power.DOWN)]
        growth = Growth()
        if (coming or down) and self.state.pending_count:
            snap = self.state.snapshot(now, cycle)  # after this cycle's starts
            used = {q: self.state.queue_used(q) for q in snap.queues}
            quota = QuotaRoom(snap.queues, used)
            growth = plan_growth(
                snap.pending, res.reasons.raw, now, snap.nodes, coming, down, place, cycle, quota
            )
        self.waiting_on = growth.waiting_on
        for jid, nodes in growth.waiting_on.items():
            res.reasons[jid] = _growing(self.book, nodes)
        grow = [self.book.nodes[n] for n in growth.resume]
        self._resume(grow, now, "for pending jobs", out)
        self._resume(to_top_up(self.book), now, "to the pool's min", out)
        idle = to_release(self.book, now, growth.busy)
        if idle:
            after = {p: x.spec.suspend_after_s for p, x in self.book.pools.items()}
            self._release(
                idle, now, f"idle for {min(after[n.pool] for n in idle):g} s", out, Power.SUSPENDING
            )

    def _track_idle(self, now: float, out: list[Command]) -> None:
        for n in self.book.in_state(Power.UP):
            rt = self.state.nodes.get(n.name)
            # runs nothing: every device, CPU and byte free (``NodeRuntime.state``'s idle,
            # without its cost: this is asked of every up node after every cycle)
            idle = (
                rt is not None
                and rt.schedulable  # a drained, unhealthy or suspect node is looked at first
                and rt.cpu_free == rt.spec.cpu_milli
                and rt.mem_free == rt.spec.memory_mib
                and rt.gpu_free.count(MILLI) == len(rt.gpu_free)
            )
            if not idle:
                n.idle_since = None
                self._timers.pop(n.name, None)
                continue
            if n.idle_since is None:
                n.idle_since = now
            at = n.idle_since + self.book.pools[n.pool].spec.suspend_after_s
            if at > now and self._timers.get(n.name) != at:
                self._timers[n.name] = at
                out.append(SetTimer(at, TIMER, n.name))

    def _resume(self, nodes: list[ElasticNode], now: float, why: str, out: list[Command]) -> None:
        by_pool: dict[str, list[ElasticNode]] = {}
        for n in nodes:
            by_pool.setdefault(n.pool, []).append(n)
        for pool_name, group in by_pool.items():
            pool = self.book.pools[pool_name]
            timeout = pool.spec.resume_timeout_s
            for n in group:
                self.book.move(n, Power.RESUMING, now, why)
                n.until = now + timeout
                out.append(NodeEvent(n.name, "powering_up", now, why))
                out.append(SetTimer(n.until, TIMER, n.name))
            out.append(PowerUp(pool_name, pool.spec.provider, self.book.specs(group), why))

    def _release(
        self, nodes: list[ElasticNode], now: float, why: str, out: list[Command], to: Power
    ) -> None:
        by_pool: dict[str, list[ElasticNode]] = {}
        for n in nodes:
            by_pool.setdefault(n.pool, []).append(n)
            self.state.drop_node(n.name)  # nothing is placed there from now on
            self._timers.pop(n.name, None)
            self.book.move(n, to, now, why)
            if to is Power.SUSPENDING:
                n.until = now + SUSPEND_TIMEOUT_S
                out.append(NodeEvent(n.name, "powering_down", now, why))
                out.append(SetTimer(n.until, TIMER, n.name))
            else:
                out.append(NodeEvent(n.name, "powered_down", now, why))
        for pool_name, group in by_pool.items():
            provider = self.book.pools[pool_name].spec.provider
            out.append(PowerDown(pool_name, provider, tuple(n.name for n in group), why))


def _growing(book: ElasticBook, nodes: tuple[str, ...]) -> Reason:
    pools = sorted({book.nodes[n].pool for n in nodes})
    shown = ", ".join(nodes[:4]) + (", …" if len(nodes) > 4 else "")
    return Reason(
        ReasonCode.GROWING,
        f"pool {', '.join(pools)} is growing for it: {len(nodes)} node"
        f"{'s' if len(nodes) != 1 else ''} powering up ({shown})",
        {"pools": pools, "nodes": list(nodes)},
    )
