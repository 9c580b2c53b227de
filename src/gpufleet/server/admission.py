"""What a submission is refused for before anything of it is stored, every problem at once
(a user fixes them in one round), in Slurm's words where Slurm refuses the same at submit:

- a queue the cluster does not have (sbatch: ``invalid partition specified: gpu``), with the
  queues it has and the nearest name;
- a priority only operators and admins may give (a user may lower its own: ``--nice``).

Each check is a pure function of the spec and what it is judged against; the service gathers
those (``reads.py``), the router refuses with what they find (``Refusal``)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from gpufleet.model.job import JobSpec

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


def priority_problems(spec: JobSpec, role: str, at: str = "body.spec") -> list[Problem]:
    """A priority above the default, asked by a role that may not give it: a user may lower
    its job's priority (``--nice=N`` is priority -N), never raise it, or it would jump every
    queue and drive priority preemption."""
    if spec.priority <= 0 or role in PRIORITY_ROLES:
        return []
    return [
        (
            f"{at}.priority",
            f"priority {spec.priority}: only operators/admins can set priority; a {role} token "
            "may lower its job's (--nice=N, a priority of -N), not raise it above 0",
        )
    ]


__all__ = [
    "IMPLICIT_QUEUE",
    "PRIORITY_ROLES",
    "Problem",
    "Refusal",
    "priority_problems",
    "queue_problems",
    "unknown_queue",
    "valid_queues",
]
