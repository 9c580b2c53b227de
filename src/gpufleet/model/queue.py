"""Queues (Slurm partitions, Kueue ClusterQueues): quota, weight, and the cohort they borrow in."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from gpufleet.model.defrag import DefragOverrides
from gpufleet.model.idle import IdlePolicy
from gpufleet.model.limits import SPEC_BOUNDS
from gpufleet.model.notice import PREEMPT_GRACE_MAX_S
from gpufleet.model.replicas import SHARING_MODES
from gpufleet.model.resources import MILLI, UNLIMITED, Resources
from gpufleet.model.validate import Fields, control_problem

# what a queue's name cannot hold: Slurm takes any partition name from scontrol create, but
# slurm.conf ends one at white space and at '#' (a comment), and sbatch -p (gpufleet's queues)
# splits a list at ',': a queue named so could never be chosen; '/' cannot be in the API's
# path (PUT /queues/{name})
QUEUE_NAME_FORBIDDEN = {
    ",": "sbatch -p's list separator",
    "#": "slurm.conf's comment",
    "/": "a path's separator",
}


def queue_name_problem(name: str) -> str | None:
    """What keeps ``name`` from being a queue's (a Slurm partition's) name, or None."""
    if problem := control_problem(name):
        return problem
    if any(c.isspace() for c in name):
        return "must be one word, without white space (as a Slurm partition's)"
    bad = [f"{c!r} ({why})" for c, why in QUEUE_NAME_FORBIDDEN.items() if c in name]
    if bad:
        return f"must not contain {' or '.join(bad)}"
    return None


@dataclass(frozen=True, slots=True)
class QueueSpec:
    name: str
    quota: Resources = UNLIMITED  # nominal quota; UNLIMITED when none is set
    weight: float = 1.0  # fair-share weight
    cohort: str = ""  # queues of one cohort lend each other idle quota
    can_borrow: bool = True
    can_lend: bool = True
    # the longest a preemption waits for a victim's checkpoint (Slurm's partition GraceTime,
    # as a cap on what each job asks: model/notice.py)
    preempt_grace_max_s: float = PREEMPT_GRACE_MAX_S
    # the highest priority a job of the queue may have, whoever submits it (an admin's too: it
    # is the queue's policy, changed by changing the queue); None: no cap
    priority_max: int | None = None
    # what is done with its jobs whose GPUs sit idle (model/idle.py); None: nothing
    idle: IdlePolicy | None = None
    # its gangs' changes to the cluster's defragmentation policy (model/defrag.py); None: none
    defrag: DefragOverrides | None = None
    # whether its video jobs may use the encoders of GPUs training holds (ADR 0062): True or
    # False whatever the controller's --pack-encoders; a pool's ``pack_encoders: false`` keeps
    # them apart there all the same; None: as the pool, else the controller, says. False also
    # keeps video jobs off the GPUs its own jobs hold (ADR 0065)
    pack_encoders: bool | None = None
    # the ways of sharing a GPU its jobs' GPU shares may run under (model/replicas.py's
    # SHARING_MODES, the nodes' label gpufleet.io/gpu-sharing; ADR 0064); (): any
    gpu_sharing: tuple[str, ...] = ()
    # the nodes its jobs run on: those carrying every one of these labels (Slurm's partition
    # Nodes=, Kueue's flavors' nodeLabels; ADR 0066); (): every node
    nodes: tuple[tuple[str, str], ...] = ()

    @property
    def limited(self) -> bool:
        # identity first: a queue without a quota shares UNLIMITED, and this is asked per job
        return self.quota is not UNLIMITED and self.quota != UNLIMITED

    @staticmethod
    def from_dict(raw: Any, *, source: str, path: str) -> QueueSpec:
        f = Fields(raw, source=source, path=path)
        name = f.text("name", required=True)
        if problem := queue_name_problem(name):
            raise f.error("name", problem)
        weight = f.number("weight", 1.0, minimum=0.0)
        if weight <= 0:
            raise f.error("weight", "must be greater than 0")
        cohort = f.text("cohort", "")
        quota = UNLIMITED
        if f.has("quota"):
            q = Fields(f.mapping("quota"), source=source, path=f.field("quota"))
            quota = Resources(
                round(q.number("gpus", UNLIMITED.gpu_milli / MILLI, minimum=0) * MILLI),
                round(q.number("cpu_cores", UNLIMITED.cpu_milli / MILLI, minimum=0) * MILLI),
                round(q.number("memory_gib", UNLIMITED.memory_mib / 1024, minimum=0) * 1024),
            )
            q.finish()
        borrow = f.flag("can_borrow", True)
        lend = f.flag("can_lend", True)
        grace = f.number("preempt_grace_max_s", PREEMPT_GRACE_MAX_S, minimum=0.0, maximum=0xFFFF)
        top = None
        if f.has("priority_max"):
            top = f.integer("priority_max", 0, minimum=0, maximum=int(SPEC_BOUNDS["priority"][1]))
        idle = None
        if f.has("idle"):
            idle = IdlePolicy.from_dict(f.raw("idle") or {}, source=source, path=f.field("idle"))
        defrag = None
        if f.has("defrag"):
            raw_defrag = f.raw("defrag") or {}
            defrag = DefragOverrides.from_dict(raw_defrag, source=source, path=f.field("defrag"))
        pack = f.flag("pack_encoders", False) if f.has("pack_encoders") else None
        modes = tuple(dict.fromkeys(f.items("gpu_sharing")))
        if bad := [m for m in modes if m not in SHARING_MODES]:
            raise f.error(
                "gpu_sharing", f"must be some of {', '.join(SHARING_MODES)}, got {bad[0]!r}"
            )
        held = tuple(sorted(f.labels("nodes").items())) if f.has("nodes") else ()
        f.finish()
        return QueueSpec(
            name,
            quota,
            weight,
            cohort,
            borrow,
            lend,
            grace,
            priority_max=top,
            idle=idle,
            defrag=defrag,
            pack_encoders=pack,
            gpu_sharing=modes,
            nodes=held,
        )


def in_node_set(labels: Iterable[tuple[str, str]], selector: tuple[tuple[str, str], ...]) -> bool:
    """Whether a node of ``labels`` is one of a queue's nodes (it carries all of ``selector``)."""
    have = dict(labels)
    return all(have.get(k) == v for k, v in selector)


def node_set_text(selector: tuple[tuple[str, str], ...]) -> str:
    """A queue's node set as the CLI takes it and shows it: ``key=value,key=value``."""
    return ",".join(f"{k}={v}" for k, v in selector)
