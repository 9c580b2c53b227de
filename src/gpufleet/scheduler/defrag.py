"""Defragmentation: free ONE leaf for a whole-GPU gang that smaller jobs keep from starting.

Priority preemption takes the cheapest victims anywhere until the gang has room, so for a gang
that must stay under one leaf it can stop jobs on every leaf and still leave it unplaceable
(Kueue #10815, Volcano #4374). Here the victims are chosen leaf by leaf: in each leaf, the
fewest-loss set of jobs lying wholly inside it whose stopping lets the gang's workers fit
there on free whole GPUs; the leaf whose set loses least (then moves fewest jobs) wins. Loss is
the work since each victim's last checkpoint (``RunningJob.lost_work``, ADR 0036).

Pure: a function of the nodes' free vectors and the candidates, no clock but ``now``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gpufleet.model.defrag import DefragPolicy
from gpufleet.model.job import JobSpec
from gpufleet.model.resources import MILLI
from gpufleet.scheduler.free_counts import full_count
from gpufleet.scheduler.snapshot import NodeView, RunningJob


@dataclass(frozen=True, slots=True)
class LeafPlan:
    """The victims that free ``leaf`` for the gang, cheapest first, and what the move costs."""

    leaf: str
    victims: tuple[RunningJob, ...]
    nodes: tuple[str, ...]  # the nodes the victims leave (the gang's, with the leaf's free ones)
    lost_gpu_s: float
    score: float

    def describe(self) -> str:
        n, k = len(self.victims), len(self.nodes)
        return (
            f"moving {n} job{'s' if n != 1 else ''} to free {k} node{'s' if k != 1 else ''} "
            f"under {self.leaf}"
        )


def wants_defrag(spec: JobSpec, policy: DefragPolicy) -> bool:
    """A gang (or whole-node job) of whole GPUs that is large enough to move others for."""
    return (
        policy.enabled
        and spec.gpus_per_worker > 0
        and spec.gpu_milli >= MILLI
        and spec.workers * spec.gpus_per_worker >= policy.min_gang_gpus
    )


# ----- the score (model/defrag.py defines it in words) ------------------------------------


def loss(v: RunningJob, now: float) -> float:
    """The work moving ``v`` throws away: since its last checkpoint; none for a service
    replica, which is moved make-before-break and keeps no work (its restart is still paid)."""
    return 0.0 if v.replica else v.lost_work(now)


def savings(gang_gpus: int, wait_s: float, policy: DefragPolicy) -> float:
    """GPU-seconds the move is credited with: the gang's GPUs for its expected wait without
    the move, at most ``savings_horizon_s``."""
    return gang_gpus * min(policy.savings_horizon_s, max(0.0, wait_s))


def disruption(victims: Iterable[RunningJob], now: float, policy: DefragPolicy) -> float:
    """GPU-seconds the move costs: each victim's work since its last checkpoint, plus
    ``restart_cost_s`` for each GPU it holds."""
    return sum(
        loss(v, now) + policy.restart_cost_s * v.spec.total_gpu_milli / MILLI for v in victims
    )


def score(saved: float, cost: float) -> float:
    """savings / (savings + disruption); 0 when nothing is saved."""
    return 0.0 if saved <= 0 else saved / (saved + cost)


def held_back(moves: Mapping[str, float], now: float, policy: DefragPolicy) -> float | None:
    """When the cluster's last move (``moves``: each leaf's last) is under ``interval_s``
    old, the time it was made; else None."""
    if not moves or policy.interval_s <= 0:
        return None
    last = max(moves.values())
    return last if now - last < policy.interval_s else None


def free_one_leaf(
    spec: JobSpec,
    cands: Iterable[RunningJob],
    nodes: Sequence[NodeView],
    now: float,
    policy: DefragPolicy,
    *,
    running: Iterable[RunningJob] = (),
    moves: Mapping[str, float] | None = None,
) -> LeafPlan | None:
    """The cheapest leaf to free for ``spec``'s workers, within ``policy``; None when a leaf
    already holds them (no fragmentation to undo), or no leaf can be freed within bounds.

    ``running``: every running job (their time limits give the gang's expected wait, the
    savings; none given: the horizon). ``moves``: the time of each leaf's last move (the
    "how often" bounds). Jobs already stopping count as gone (their devices are on the way
    back)."""
    moves = moves or {}
    if held_back(moves, now, policy) is not None:
        return None
    g, workers = spec.gpus_per_worker, spec.workers
    models = set(spec.gpu_models)
    usable = {
        n.name: n
        for n in nodes
        if n.schedulable and len(n.gpu_free) >= g and (not models or n.gpu_model in models)
    }
    free = {name: list(n.gpu_free) for name, n in usable.items()}
    movable: list[RunningJob] = []
    for r in cands:
        if r.stopping_since is not None:
            _give_back(free, r)
        else:
            movable.append(r)
    by_leaf: dict[str, list[str]] = {}
    for name, n in usable.items():
        by_leaf.setdefault(n.leaf, []).append(name)
    for names in by_leaf.values():
        if _fit(free, names, g) >= workers:
            return None  # the gang fits a leaf on GPUs: what blocks it is not fragmentation
    open_leaves = [
        leaf
        for leaf in sorted(by_leaf)
        if leaf not in moves or now - moves[leaf] >= policy.leaf_interval_s
    ]
    if not open_leaves:
        return None
    wait = expected_wait(free, by_leaf, running, g, workers, now)
    saved = savings(g * workers, wait, policy)
    plans = []
    for leaf in open_leaves:
        names = by_leaf[leaf]
        inside = [v for v in movable if all(p.node in names for p in v.allocation)]
        plan = _plan_leaf(leaf, names, inside, free, g, workers, now, policy, saved)
        if plan is None:
            continue
        if policy.room_elsewhere:
            others = [n for n in free if usable[n].leaf != leaf]
            if not _fits_elsewhere(plan.victims, free, others):
                continue
        plans.append(plan)
    if not plans:
        return None
    return min(plans, key=lambda p: (p.lost_gpu_s, len(p.victims), p.leaf))


def expected_wait(
    free: dict[str, list[int]],
    by_leaf: Mapping[str, list[str]],
    running: Iterable[RunningJob],
    g: int,
    workers: int,
    now: float,
) -> float:
    """Seconds until some leaf would hold ``workers`` x ``g`` whole GPUs were the running
    jobs to end at their time limits (``inf``: none would, jobs without limits never end).
    Jobs already stopping are in ``free``."""
    leaf_of = {n: leaf for leaf, names in by_leaf.items() for n in names}
    ends: dict[str, list[tuple[float, RunningJob]]] = {leaf: [] for leaf in by_leaf}
    for r in running:
        end = r.expected_end
        if r.stopping_since is not None or end is None:
            continue
        for leaf in {leaf_of[p.node] for p in r.allocation if p.node in leaf_of}:
            ends[leaf].append((end, r))
    best = float("inf")
    for leaf, names in by_leaf.items():
        local = {n: list(free[n]) for n in names}
        for end, r in sorted(ends[leaf], key=lambda e: (e[0], e[1].id)):
            if end - now >= best:
                break
            _give_back(local, r)
            if _fit(local, names, g) >= workers:
                best = max(0.0, end - now)
                break
    return best


def _give_back(free: dict[str, list[int]], r: RunningJob) -> None:
    for p in r.allocation:
        devs = free.get(p.node)
        if devs is not None:
            for d in p.gpus:
                devs[d] += p.gpu_milli


def _fit(free: dict[str, list[int]], names: Iterable[str], g: int) -> int:
    return sum(full_count(tuple(free[n])) // g for n in names)


def _plan_leaf(
    leaf: str,
    names: list[str],
    inside: list[RunningJob],
    free: dict[str, list[int]],
    g: int,
    workers: int,
    now: float,
    policy: DefragPolicy,
    saved: float,
) -> LeafPlan | None:
    """Nodes in order of loss per worker they would gain were all their jobs stopped, until
    the leaf holds the gang; then each victim (dearest first) that is not needed is kept."""
    local = {n: free[n] for n in names}
    on_node: dict[str, list[RunningJob]] = {n: [] for n in names}
    for v in inside:
        for node in {p.node for p in v.allocation}:
            on_node[node].append(v)
    have = _fit(local, names, g)
    steps = []
    for n in names:
        trial = {n: list(local[n])}
        for v in on_node[n]:
            _give_back(trial, v)
        gain = full_count(tuple(trial[n])) // g - full_count(tuple(local[n])) // g
        if gain > 0:
            cost = sum(loss(v, now) for v in on_node[n])
            steps.append((cost / gain, n, gain))
    chosen: dict[str, RunningJob] = {}
    for _, n, gain in sorted(steps):
        if have >= workers:
            break
        for v in on_node[n]:
            chosen[v.id] = v
        have += gain
    if have < workers:
        return None
    victims = sorted(chosen.values(), key=lambda v: (loss(v, now), v.id))
    for v in sorted(victims, key=lambda v: (-loss(v, now), v.id)):  # the reprieve
        rest = [o for o in victims if o is not v]
        if _fit_without(local, names, rest, g) >= workers:
            victims = rest
    if not victims or _fit_without(local, names, victims, g) < workers:
        return None
    lost = sum(loss(v, now) for v in victims)
    worth = score(saved, disruption(victims, now, policy))
    if lost > policy.max_lost_gpu_s or worth < policy.min_score:
        return None
    touched = sorted({p.node for v in victims for p in v.allocation})
    return LeafPlan(leaf, tuple(victims), tuple(touched), lost, worth)


def _fit_without(
    local: dict[str, list[int]], names: list[str], victims: Sequence[RunningJob], g: int
) -> int:
    trial = {n: list(local[n]) for n in names}
    for v in victims:
        _give_back(trial, v)
    return _fit(trial, names, g)


def _fits_elsewhere(
    victims: Sequence[RunningJob], free: dict[str, list[int]], others: list[str]
) -> bool:
    """Whether every worker of ``victims`` finds devices on ``others`` (largest first, each on
    the node with the fewest free devices that holds it)."""
    room = {n: list(free[n]) for n in others}
    workers = sorted(
        ((len(p.gpus), p.gpu_milli) for v in victims for p in v.allocation), reverse=True
    )
    for k, milli in workers:
        best: tuple[int, str, list[int]] | None = None
        for n, devs in room.items():
            fit = [d for d, f in enumerate(devs) if f >= milli]
            if len(fit) >= k and (best is None or len(fit) < best[0]):
                best = (len(fit), n, fit[:k])
        if best is None:
            return False
        for d in best[2]:
            room[best[1]][d] -= milli
    return True
