"""What a submission is refused for before anything of it is stored, every problem at once
(a user fixes them in one round), in Slurm's words where Slurm refuses the same at submit:

- a queue the cluster does not have (sbatch: ``invalid partition specified: gpu``), with the
  queues it has and the nearest name;
- a reservation it may not use (sbatch: ``Requested reservation is invalid``, ``Access denied
  to requested reservation``);
- a priority only operators and admins may give (a user may lower its own: ``--nice``; sbatch
  refuses a user's negative ``--nice``, "Invalid --nice value", and ignores a user's
  ``--priority`` without a word, which gpufleet refuses instead: checked on Slurm 22.05);
- a request no node of the cluster could ever hold (sbatch: ``Requested node configuration is
  not available``), with the largest shape that fits: judged by the scheduler's own
  never-fits check against every configured node, down or not (as Slurm judges against its
  node configuration), so a job that fits once its nodes come back is kept; a GPU share of a
  queue whose ``gpu_sharing`` no configured node shares GPUs by, in the same words
  (scheduler/queue_sharing.py, ADR 0064); a job of a queue with a node set (its ``nodes``,
  ADR 0066) is judged against the set's nodes only, and refused so when none is in the set.

Each check is a pure function of the spec and what it is judged against; the service gathers
those (``reads.py``), the router refuses with what they find (``Refusal``)."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from gpufleet.model.job import JobSpec
from gpufleet.model.queue import QueueSpec, in_node_set, node_set_text
from gpufleet.model.reservation import NodeReservation
from gpufleet.scheduler import queue_sharing
from gpufleet.scheduler.explain import never_reason
from gpufleet.scheduler.framework import Profile
from gpufleet.scheduler.never_fits import NeverFits, never_fits
from gpufleet.scheduler.plugins.filter_constraint import NO_FEATURE
from gpufleet.scheduler.snapshot import NodeView, PendingJob, Snapshot
from gpufleet.scheduler.workspace import Workspace

# a cluster that declares no queues (no queue file, none in its cluster spec) has this one,
# the queue a job names when it names none; only an admin makes more (PUT /queues/{name})
IMPLICIT_QUEUE = "default"

# the roles that may raise a job's priority (Slurm: "Only operators/admins can set priority")
PRIORITY_ROLES = frozenset({"admin"})

Problem = tuple[str, str]  # (field, message), as FieldErrors takes them


@dataclass(slots=True)
class Refusal:
    """Everything wrong with one submission. ``forbidden``: problems of what the token may do
    (403 when they are all there is), the others are of the request (422)."""

    invalid: list[Problem] = field(default_factory=list)
    forbidden: list[Problem] = field(default_factory=list)

    @property
    def problems(self) -> list[Problem]:
        return [*self.invalid, *self.forbidden]

    @property
    def status(self) -> int:
        return 422 if self.invalid else 403

    def __bool__(self) -> bool:
        return bool(self.invalid or self.forbidden)


def valid_queues(configured: Iterable[str], declared: bool) -> list[str]:
    """The queues a job may name, sorted: those configured (a queue file, a cluster spec, an
    admin), and ``default`` on a cluster whose files declare none."""
    names = set(configured)
    if not declared:
        names.add(IMPLICIT_QUEUE)
    return sorted(names)


def queue_problems(spec: JobSpec, valid: Sequence[str], at: str = "body.spec") -> list[Problem]:
    """Each queue the job names that the cluster lacks (Slurm checks every partition of
    ``-p a,b``), with the valid ones and the nearest name: a typo is told, never created."""
    named = (
        [("queue", spec.queue)]
        if not spec.queues
        else [(f"queues[{i}]", q) for i, q in enumerate(spec.queues)]
    )
    return [(f"{at}.{key}", unknown_queue(q, valid)) for key, q in named if q not in valid]


def unknown_queue(name: str, valid: Sequence[str]) -> str:
    """sbatch's words for a partition that does not exist, and what to name instead."""
    near = difflib.get_close_matches(name, valid, n=1)
    hint = f"did you mean {near[0]!r}? " if near else ""
    return f"invalid partition specified: {name} ({hint}queues: {', '.join(valid)})"


def reservation_problems(
    spec: JobSpec,
    reservations: Mapping[str, NodeReservation],
    now: float,
    role: str,
    at: str = "body.spec",
) -> list[Problem]:
    """A reservation the job names that does not exist or has ended (sbatch: ``Requested
    reservation is invalid``), or that is not for its user (``Access denied to requested
    reservation``; admins may use any)."""
    name = spec.reservation
    if not name:
        return []
    r = reservations.get(name)
    if r is None or r.end <= now:
        live = sorted(n for n, x in reservations.items() if x.end > now)
        near = difflib.get_close_matches(name, live, n=1)
        hint = f"did you mean {near[0]!r}? " if near else ""
        return [
            (
                f"{at}.reservation",
                f"Requested reservation is invalid: {name} ({hint}reservations: "
                f"{', '.join(live) or 'none'}; see 'gpufleet reserve ls')",
            )
        ]
    if role != "admin" and not r.admits(spec.user):
        return [
            (
                f"{at}.reservation",
                f"Access denied to requested reservation {name}: it is for "
                f"{', '.join(r.users) or 'no user'}, not {spec.user}",
            )
        ]
    return []


def priority_problems(
    spec: JobSpec, role: str, queues: Mapping[str, QueueSpec] | None = None, at: str = "body.spec"
) -> list[Problem]:
    """A priority above the default, asked by a role that may not give it: a user may lower
    its job's priority (``--nice=N`` is priority -N), never raise it, or it would jump every
    queue and drive priority preemption. Then each of the job's queues' ``priority_max``,
    whoever asks (the queue's policy)."""
    capped = [
        (name, q.priority_max)
        for name in spec.partitions
        if (q := (queues or {}).get(name)) is not None and q.priority_max is not None
    ]
    over = [
        (
            f"{at}.priority",
            f"priority {spec.priority} is above queue {name}'s priority_max {top} (an admin "
            "changes the queue, not the job)",
        )
        for name, top in capped
        if spec.priority > top
    ]
    if spec.priority <= 0 or role in PRIORITY_ROLES:
        return over
    return [
        *over,
        (
            f"{at}.priority",
            f"priority {spec.priority}: only operators/admins can set priority; a {role} token "
            "may lower its job's (--nice=N, a priority of -N), not raise it above 0 (sbatch: "
            '"Invalid --nice value" for a negative --nice)',
        ),
    ]


def fit_problems(
    spec: JobSpec,
    nodes: Sequence[NodeView],
    profile: Profile,
    memo: NeverFits | None = None,
    at: str = "body.spec",
    within: str = "",
) -> list[Problem]:
    """``spec`` if no node of ``nodes`` (the configured ones, each as if up and empty) could
    ever hold it; none known yet: nothing to judge by. ``memo``: the answers for these nodes;
    ``within``: which nodes those are, if not all (said after why)."""
    if not nodes:
        return []
    snap = Snapshot(0.0, nodes, (), ())
    memo = memo if memo is not None else NeverFits()

    def fits(s: JobSpec) -> bool:
        return not never_fits(PendingJob("submit", s, 0.0), snap, profile, memo)

    if fits(spec):
        return []
    why = never_reason(PendingJob("submit", spec, 0.0), Workspace.emptied(nodes)).message
    largest = _largest(spec, fits)
    # Slurm's controller names a -C feature no node has apart ("Batch job submission failed:
    # Invalid feature specification", sbatch -C a100 on Slurm 22.05 without such a node)
    head = (
        "Invalid feature specification"
        if why.startswith(NO_FEATURE)
        else "Requested node configuration is not available"
    )
    return [(at, f"{head}: {why}{within}; {largest}")]


def node_set_problems(
    spec: JobSpec,
    queues: Mapping[str, QueueSpec],
    nodes: Sequence[NodeView],
    profile: Profile,
    memo: NeverFits | None = None,
    at: str = "body.spec",
) -> list[Problem]:
    """``fit_problems`` judged against the nodes of its queue's node set only (a queue without
    one: every node), and ``spec`` refused when no node of ``nodes`` is in the set."""
    q = queues.get(spec.queue)
    selector = () if q is None else q.nodes
    if not selector or not nodes:
        return fit_problems(spec, nodes, profile, memo, at)
    why = queue_sharing.no_node_set(spec.queue, selector, nodes)
    if why is not None:
        return [(at, f"Requested node configuration is not available: {why.message}")]
    held = [v for v in nodes if in_node_set(v.labels, selector)]
    within = f" on the {len(held)} node(s) of queue {spec.queue} ({node_set_text(selector)})"
    return fit_problems(spec, held, profile, None, at, within)


def sharing_problems(
    spec: JobSpec,
    queues: Mapping[str, QueueSpec],
    nodes: Sequence[NodeView],
    at: str = "body.spec",
) -> list[Problem]:
    """``spec`` if it holds a GPU share and its queue's ways of sharing a GPU are those of no
    node of ``nodes`` (the configured ones); none known yet: nothing to judge by."""
    q = queues.get(spec.queue)
    why = None if q is None else queue_sharing.nowhere(spec, q.gpu_sharing, nodes)
    if why is None:
        return []
    return [(at, f"Requested node configuration is not available: {why.message}")]


def _largest(spec: JobSpec, fits: Callable[[JobSpec], bool]) -> str:
    """The largest shapes like ``spec`` that fit: fewer GPUs per worker, or fewer workers."""
    shapes = []
    if spec.gpus_per_worker > 1:
        g = _most(lambda g: fits(replace(spec, gpus_per_worker=g)), spec.gpus_per_worker - 1)
        if g:
            shapes.append(f"{spec.workers} worker(s) of {_gpus(g)}")
    if spec.workers > 1:
        w = _most(lambda w: fits(replace(spec, workers=w)), spec.workers - 1)
        if w:
            shapes.append(f"{w} worker(s) of {_gpus(spec.gpus_per_worker)}")
    if not shapes:
        return "no fewer GPUs or workers fit either: see its other requirements"
    return "the largest that fits: " + " or ".join(shapes)


def _gpus(n: int) -> str:
    return "1 GPU" if n == 1 else f"{n} GPUs"


def _most(ok: Callable[[int], bool], hi: int) -> int:
    """The largest n in 1..hi with ok(n) (0: none), ``ok`` true up to some n and false above."""
    lo, best = 1, 0
    while lo <= hi:
        mid = (lo + hi) // 2
        if ok(mid):
            best, lo = mid, mid + 1
        else:
            hi = mid - 1
    return best


__all__ = [
    "IMPLICIT_QUEUE",
    "PRIORITY_ROLES",
    "Problem",
    "Refusal",
    "fit_problems",
    "node_set_problems",
    "priority_problems",
    "queue_problems",
    "reservation_problems",
    "sharing_problems",
    "unknown_queue",
    "valid_queues",
]
