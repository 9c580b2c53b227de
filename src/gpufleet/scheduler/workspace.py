"""The cycle's working copy of free capacity, with the indexes that make placement cheap.

A snapshot is immutable; the cycle places job after job, so it needs a mutable view of what is
still free. ``Workspace`` copies the per-node free vectors once per cycle (O(nodes)) and keeps:

* per GPU model and per (model, leaf), buckets of nodes by their count of *fully free* devices,
  so "the tightest node with at least g free GPUs" is a walk over at most 9 buckets;
* per (model, leaf), the set of nodes with a partly used device, for fractional requests.

Every assignment updates the indexes in O(1), so a placement costs far less than a node scan.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from gpufleet.model import replicas
from gpufleet.model.allocation import Placement
from gpufleet.model.resources import MILLI
from gpufleet.scheduler.free_counts import EmptiedViews, full_count, partly_used
from gpufleet.scheduler.request import Select, WorkerRequest
from gpufleet.scheduler.snapshot import NodeView

Key = tuple[str, int]  # (gpu model, leaf index)


@dataclass(frozen=True, slots=True)
class Domain:
    """A part of the fabric tree a gang must stay inside: a node, a leaf, a pod, or everything."""

    level: str  # "node" | "leaf" | "pod" | "any"
    index: int = -1  # node, leaf or pod index; -1 for "any"


ANYWHERE = Domain("any")


class Workspace:
    def __init__(self, nodes: Sequence[NodeView]) -> None:
        self._setup(
            nodes,
            nodes,
            [v.gpu_free for v in nodes],
            [v.cpu_free for v in nodes],
            [v.mem_free for v in nodes],
        )

    @classmethod
    def emptied(cls, nodes: Sequence[NodeView]) -> Workspace:
        """A workspace of the schedulable ``nodes`` with all their capacity free (what an empty
        cluster could place), as ``Workspace([replace(n, gpu_free=all free, ...) ...])``."""
        up = [n for n in nodes if n.schedulable]
        ws = object.__new__(cls)
        ws._setup(
            EmptiedViews(up),
            up,
            [(MILLI,) * len(n.gpu_free) for n in up],
            [n.cpu_total for n in up],
            [n.mem_total for n in up],
        )
        return ws

    @classmethod
    def refreshed(
        cls,
        prev: Workspace | None,
        nodes: Sequence[NodeView],
        changed: Iterable[int] | None = None,
    ) -> Workspace:
        """``Workspace(nodes)``, made by updating ``prev`` in place where that is cheaper
        (``workspace_refresh.refreshed`` says when)."""
        from gpufleet.scheduler import workspace_refresh  # it builds on this module

        return workspace_refresh.refreshed(prev, nodes, changed)

    def _setup(
        self,
        views: Sequence[NodeView],
        nodes: Sequence[NodeView],
        gfree: list[tuple[int, ...]],
        cpu: list[int],
        mem: list[int],
    ) -> None:
        """``views`` as the workspace shows them; names, fabric places, models and health read
        from ``nodes`` (the same nodes, maybe with other free capacity)."""
        self.views = views
        self._static = nodes  # names, features, totals (not free capacity)
        self.n = len(gfree)
        # free milli per device, one tuple per node: assign/release replace a node's tuple, so
        # copy() shares them (a what-if copy costs a few list copies, not one per node)
        self.gfree = gfree
        self.cpu = cpu
        self.mem = mem
        # every node whose free capacity or health changed, in order (assign, release, hold,
        # refresh): what an index kept outside the workspace (``state_index``) catches up on
        self.touched: list[int] = []
        # the workspace this one was copied from and how far its log was then (None: not a copy)
        self.copied_from: tuple[Workspace, int] | None = None
        self._index_fabric(nodes)
        self._index_free()

    def _index_fabric(self, nodes: Sequence[NodeView]) -> None:
        """Names, models, health and each node's place in the fabric tree (leaf, pod)."""
        n = self.n
        leaf_ix: dict[str, int] = {}
        pod_ix: dict[str, int] = {}
        self.leaf_names: list[str] = []
        self.pod_names: list[str] = []
        self.leaf_pod: list[int] = []
        self.node_leaf = [0] * n
        self.by_name: dict[str, int] = {}
        self.model: list[str] = []
        self.ok: list[bool] = []
        self.replicas = [replicas.of(v.labels) for v in nodes]  # 0: GPUs not offered as replicas
        for i in range(n):
            v = nodes[i]
            self.by_name[v.name] = i
            self.model.append(v.gpu_model)
            self.ok.append(v.schedulable)
            leaf = leaf_ix.get(v.leaf)
            if leaf is None:
                leaf = leaf_ix[v.leaf] = len(self.leaf_names)
                self.leaf_names.append(v.leaf)
                if v.pod not in pod_ix:
                    pod_ix[v.pod] = len(self.pod_names)
                    self.pod_names.append(v.pod)
                self.leaf_pod.append(pod_ix[v.pod])
            self.node_leaf[i] = leaf
        self.pod_leaves: list[list[int]] = [[] for _ in self.pod_names]
        for leaf, pod in enumerate(self.leaf_pod):
            self.pod_leaves[pod].append(leaf)

    def _index_free(self) -> None:
        """The buckets of nodes by free whole devices, per model and per (model, leaf), and
        the totals kept with them; the reservations and filters start empty."""
        n, gfree = self.n, self.gfree
        self.full = [full_count(g) for g in gfree]
        self.max_gpus = max(map(len, gfree), default=0)
        nb = self.max_gpus + 1
        # buckets[model][k]: schedulable nodes of that model with exactly k fully free devices
        self.buckets: dict[str, list[dict[int, None]]] = {}
        self.leaf_buckets: dict[Key, list[dict[int, None]]] = {}
        self.partial: dict[Key, dict[int, None]] = {}
        self.free_full = 0  # fully free devices on schedulable nodes, all models
        self.model_free: dict[str, int] = {}  # the same, per model (kept with the buckets)
        self.cpu_only: list[int] = []  # schedulable nodes, for jobs that need no GPU
        # Backfill: whole devices per node that must stay free for a reservation; honoured
        # while ``fence`` is on (for jobs that would still run at the reserved start).
        self.reserved: dict[int, int] = {}
        self.reserved_cpu: dict[int, int] = {}  # CPU milli and MiB kept the same way
        self.reserved_mem: dict[int, int] = {}
        self.fence = False
        # Node filters (Slurm's -w/-x/-C/--gres type): per Select, the nodes that pass them
        # (static facts: shared by copies); ``barred`` holds the nodes a distinct-node gang
        # being placed already uses (empty between placements)
        self.allow: dict[Select, frozenset[int]] = {}
        self.barred: set[int] = set()
        self._last_allowed: tuple[Select, frozenset[int]] | None = None
        ok, model, full, node_leaf = self.ok, self.model, self.full, self.node_leaf
        buckets, leaf_buckets, model_free = self.buckets, self.leaf_buckets, self.model_free
        free_full = 0
        for i in range(n):
            if not ok[i]:
                continue
            self.cpu_only.append(i)
            m = model[i]
            g = gfree[i]
            if not m or not g:
                continue
            key = (m, node_leaf[i])
            k = full[i]
            free_full += k
            mb = buckets.get(m)
            if mb is None:
                mb = buckets[m] = [{} for _ in range(nb)]
                model_free[m] = 0
            mb[k][i] = None
            model_free[m] += k
            lb = leaf_buckets.get(key)
            if lb is None:
                lb = leaf_buckets[key] = [{} for _ in range(nb)]
            lb[k][i] = None
            if k < len(g) and partly_used(g):
                self.partial.setdefault(key, {})[i] = None
        self.free_full = free_full
        # only models with an indexed (schedulable) node: a pool that is all drained has none
        self.models = sorted(buckets)

    # ----- reading -------------------------------------------------------------------------

    def allowed_models(self, req: WorkerRequest) -> list[str]:
        if not req.models:
            return self.models
        return [m for m in req.models if m in self.buckets]

    @property
    def nodes(self) -> Sequence[NodeView]:
        """The nodes' static facts (names, features, totals), by index."""
        return self._static

    def allowed(self, sel: Select) -> frozenset[int]:
        """The nodes that pass every node filter for ``sel`` (worked out once per Select)."""
        last = self._last_allowed
        if last is not None and last[0] is sel:  # a placement asks again and again: no hash
            return last[1]
        out = self.allow.get(sel)
        if out is None:
            from gpufleet.scheduler import filters  # the plugins import this module

            out = self.allow[sel] = filters.eligible(sel, self._static)
        self._last_allowed = (sel, out)
        return out

    def idle(self, i: int) -> bool:
        v = self._static[i]
        return (
            self.cpu[i] >= v.cpu_total
            and self.mem[i] >= v.mem_total
            and all(x >= MILLI for x in self.gfree[i])
        )

    def selected(self, i: int, sel: Select) -> bool:
        """Whether node ``i`` may take one more worker of a job with ``sel`` now."""
        if i in self.barred or i not in self.allowed(sel):
            return False
        if sel.exclusive:
            return self.idle(i)
        return not sel.whole_mem or self.mem[i] >= self._static[i].mem_total

    def devices_for(self, i: int, req: WorkerRequest) -> tuple[int, ...] | None:
        """Device indices on node ``i`` for one worker (lowest-index fully free devices for whole
        GPUs; the tightest device that fits for a fraction), or None when it does not fit."""
        if not self.ok[i] or not self._host_fits(i, req) or not self._kind_ok(i, req):
            return None
        sel = req.select
        if sel is not None and not self.selected(i, sel):
            return None
        if req.gpus and req.models and self.model[i] not in req.models:
            return None
        if sel is not None and sel.exclusive:
            return tuple(range(len(self.gfree[i])))  # the whole node (idle: checked above)
        if req.gpus == 0:
            return ()
        g = self.gfree[i]
        if req.whole:
            if self.full[i] - (self.reserved.get(i, 0) if self.fence else 0) < req.gpus:
                return None
            out = [d for d, free in enumerate(g) if free >= MILLI][: req.gpus]
            return tuple(out)
        # behind the fence, a fraction may not break into a whole device kept for a reservation
        whole_ok = not self.fence or self.full[i] > self.reserved.get(i, 0)
        best = -1
        for d, free in enumerate(g):
            if free >= MILLI and not whole_ok:
                continue
            if free >= req.gpu_milli and (best < 0 or free < g[best]):
                best = d
        return None if best < 0 else (best,)

    def workers_fit(self, i: int, req: WorkerRequest) -> int:
        """How many workers of ``req`` node ``i`` could take now (an exact count)."""
        if not self.ok[i] or (req.models and self.model[i] not in req.models):
            return 0
        if not self._kind_ok(i, req):
            return 0
        if req.select is not None:
            if not self.selected(i, req.select):
                return 0
            if req.select.one_per_node:
                return 1 if self.devices_for(i, req) is not None else 0
        n = 10**9
        if req.cpu_milli:
            n = self.cpu[i] // req.cpu_milli
        if req.memory_mib:
            n = min(n, self.mem[i] // req.memory_mib)
        if req.gpus == 0:
            return n
        if req.whole:
            return min(n, self.full[i] // req.gpus)
        return min(n, sum(free // req.gpu_milli for free in self.gfree[i]))

    def _leaves(self, domain: Domain) -> list[int] | None:
        if domain.level == "leaf":
            return [domain.index]
        if domain.level == "pod":
            return self.pod_leaves[domain.index]
        return None

    def candidates(self, req: WorkerRequest, domain: Domain = ANYWHERE) -> Iterator[int]:
        """Nodes in ``domain`` where one worker of ``req`` fits, found through the indexes.

        Whole-GPU requests walk the buckets from the tightest upwards, so the first candidate is
        a best fit by free GPUs; fractional requests look at partly used nodes first. The
        iterator reads the live indexes: stop iterating before you assign or release."""
        if domain.level == "node":
            if self.devices_for(domain.index, req) is not None:
                yield domain.index
            return
        if req.gpus == 0:
            for i in self.cpu_only:
                if self._in(i, domain) and self.devices_for(i, req) is not None:
                    yield i
            return
        leaves = self._leaves(domain)
        models = self.allowed_models(req)
        need = req.gpus if req.whole else 1
        if not req.whole:
            for m in models:
                for leaf in leaves if leaves is not None else range(len(self.leaf_names)):
                    for i in self.partial.get((m, leaf), ()):
                        if self.devices_for(i, req) is not None:
                            yield i
        for k in range(need, self.max_gpus + 1):
            for m in models:
                if leaves is None:
                    bucket = self.buckets[m][k]
                    if bucket:
                        yield from self._fitting(bucket, req)
                else:
                    for leaf in leaves:
                        lb = self.leaf_buckets.get((m, leaf))
                        if lb is not None and lb[k]:
                            yield from self._fitting(lb[k], req)

    def takes(self, i: int, req: WorkerRequest) -> bool:
        """Whether ``candidates(req)`` yields node ``i`` (its domain aside), without the walk."""
        if req.gpus == 0:
            return self.ok[i] and self.devices_for(i, req) is not None
        m, g = self.model[i], self.gfree[i]
        if not self.ok[i] or not m or not g or (req.models and m not in req.models):
            return False
        k = self.full[i]
        if not req.whole and k < len(g) and partly_used(g) and self.devices_for(i, req) is not None:
            return True
        return k >= (req.gpus if req.whole else 1) and any(True for _ in self._fitting((i,), req))

    def _kind_ok(self, i: int, req: WorkerRequest) -> bool:
        """A node whose GPUs are replicas takes GPU workers asking one replica only."""
        return replicas.takes(self.replicas[i], req.gpus, req.gpu_milli)

    def _host_fits(self, i: int, req: WorkerRequest) -> bool:
        """CPU and memory for one worker on node ``i`` (behind the fence: less what is kept)."""
        cpu, mem = self.cpu[i], self.mem[i]
        if self.fence:
            cpu -= self.reserved_cpu.get(i, 0)
            mem -= self.reserved_mem.get(i, 0)
        return cpu >= req.cpu_milli and mem >= req.memory_mib

    def _fitting(self, nodes: Iterable[int], req: WorkerRequest) -> Iterator[int]:
        fenced = self.reserved if self.fence else None
        sel = req.select
        for i in nodes:
            if sel is not None and not self.selected(i, sel):
                continue
            if self._host_fits(i, req) and self._kind_ok(i, req):
                if fenced and self.full[i] - fenced.get(i, 0) < req.gpus:
                    continue
                yield i

    def _in(self, i: int, domain: Domain) -> bool:
        if domain.level == "any":
            return True
        if domain.level == "leaf":
            return self.node_leaf[i] == domain.index
        if domain.level == "pod":
            return self.leaf_pod[self.node_leaf[i]] == domain.index
        return i == domain.index

    def capacity_bound(self, req: WorkerRequest, leaf: int) -> int:
        """An upper bound on the workers of a whole-GPU ``req`` that ``leaf`` could take now,
        from bucket sizes alone (O(max GPUs per node) per model)."""
        total = 0
        for m in self.allowed_models(req):
            lb = self.leaf_buckets.get((m, leaf))
            if lb is None:
                continue
            for k in range(req.gpus, self.max_gpus + 1):
                if lb[k]:
                    total += len(lb[k]) * (k // req.gpus)
        return total

    def free_gpus(self, req: WorkerRequest, leaves: Iterable[int] | None = None) -> int:
        """Fully free devices of allowed models (in ``leaves``, or everywhere)."""
        total = 0
        if leaves is None:
            return sum(self.model_free[m] for m in self.allowed_models(req))
        for m in self.allowed_models(req):
            for leaf in leaves:
                lb = self.leaf_buckets.get((m, leaf))
                if lb is not None:
                    total += sum(k * len(b) for k, b in enumerate(lb))
        return total

    def copy(self) -> Workspace:
        """An independent copy (for what-if: reservations, preemption)."""
        c = object.__new__(Workspace)
        c.__dict__.update(self.__dict__)
        c.gfree = list(self.gfree)  # the tuples inside are never changed in place
        c.cpu = list(self.cpu)
        c.mem = list(self.mem)
        c.full = list(self.full)
        c.ok = list(self.ok)
        c.buckets = {m: [b.copy() for b in bs] for m, bs in self.buckets.items()}
        c.leaf_buckets = {k: [b.copy() for b in bs] for k, bs in self.leaf_buckets.items()}
        c.partial = {k: v.copy() for k, v in self.partial.items()}
        c.reserved = self.reserved.copy()
        c.reserved_cpu = self.reserved_cpu.copy()
        c.reserved_mem = self.reserved_mem.copy()
        c.model_free = self.model_free.copy()
        c.fence = False
        c.barred = set()
        c.touched = []
        c.copied_from = (self, len(self.touched))
        return c

    # ----- writing -------------------------------------------------------------------------

    def assign(self, i: int, devices: tuple[int, ...], req: WorkerRequest) -> Placement:
        self.touched.append(i)
        self.unindex(i)
        g = list(self.gfree[i])
        milli, cpu, mem = req.gpu_milli, req.cpu_milli, req.memory_mib
        sel = req.select
        if sel is not None and sel.exclusive:  # the whole node: every device, CPU and byte
            milli, cpu, mem = MILLI, self.cpu[i], self.mem[i]
        elif sel is not None and sel.whole_mem:
            mem = self.mem[i]
        for d in devices:
            g[d] -= milli
        t = self.gfree[i] = tuple(g)
        self.full[i] = full_count(t)
        self.cpu[i] -= cpu
        self.mem[i] -= mem
        self._index(i)
        return Placement(self.views[i].name, devices, milli, cpu, mem)

    def release(self, i: int, p: Placement) -> None:
        self.touched.append(i)
        self.unindex(i)
        g = list(self.gfree[i])
        milli = p.gpu_milli
        for d in p.gpus:
            g[d] += milli
        t = self.gfree[i] = tuple(g)
        self.full[i] = full_count(t)
        self.cpu[i] += p.cpu_milli
        self.mem[i] += p.memory_mib
        self._index(i)

    def show(self, nodes: Sequence[NodeView]) -> None:
        """``nodes`` as the workspace's views and static facts from now on (a refresh that
        re-indexed the nodes whose free capacity changed)."""
        self.views = nodes
        self._static = nodes

    def hold(self, i: int) -> None:
        """Take node ``i`` out of the indexes (its capacity is reserved or it is unusable)."""
        self.touched.append(i)
        self.unindex(i)
        self.ok[i] = False

    def unindex(self, i: int) -> None:
        m = self.model[i]
        if not self.ok[i] or not m or not self.gfree[i]:
            return
        key = (m, self.node_leaf[i])
        k = self.full[i]
        self.free_full -= k
        self.model_free[m] -= k
        self.buckets[m][k].pop(i, None)
        self.leaf_buckets[key][k].pop(i, None)
        part = self.partial.get(key)
        if part is not None:
            part.pop(i, None)

    def count_in(self, i: int) -> tuple[str, tuple[str, int], int, tuple[int, ...]] | None:
        """Add node ``i``'s fully free devices to the totals; its model, (model, leaf) key,
        that count and its free vector, for the caller to bucket it (None: not indexed)."""
        m = self.model[i]
        g = self.gfree[i]
        if not self.ok[i] or not m or not g:
            return None
        k = self.full[i]
        self.free_full += k
        self.model_free[m] += k
        return m, (m, self.node_leaf[i]), k, g

    def _index(self, i: int) -> None:
        counted = self.count_in(i)
        if counted is None:
            return
        m, key, k, g = counted
        self.buckets[m][k][i] = None
        self.leaf_buckets[key][k][i] = None
        if k < len(g) and partly_used(g):
            self.partial.setdefault(key, {})[i] = None
