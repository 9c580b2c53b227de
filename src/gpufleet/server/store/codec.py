"""Exact JSON shapes of the model's dataclasses, as the store keeps them.

These are the store's own formats, not the user-facing YAML (``JobSpec.from_dict`` rounds CPU
cores to milli and accepts aliases): ``spec_from_dict(spec_to_dict(s)) == s`` for every spec.
A key missing on read takes the dataclass default, so rows written before a field was added
still load; an unknown key is refused, since it means a newer writer.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from gpufleet.model.allocation import Allocation, Placement
from gpufleet.model.cluster import NodeSpec
from gpufleet.model.container import container_from_dict
from gpufleet.model.defrag import DefragOverrides
from gpufleet.model.idle import IdlePolicy
from gpufleet.model.job import JobSpec, Topology, TopologyLevel, WarningSignal
from gpufleet.model.notice import CheckpointNotice
from gpufleet.model.queue import QueueSpec
from gpufleet.model.resources import Resources
from gpufleet.model.secrets import ref_from_dict, ref_to_dict


class CodecError(ValueError):
    """A stored document that does not decode: names the kind and the key."""


def _check_keys(kind: str, data: Mapping[str, Any], allowed: Iterable[str]) -> None:
    if not isinstance(data, Mapping):
        raise CodecError(f"{kind}: expected a JSON object, got {type(data).__name__}")
    unknown = sorted(set(data) - set(allowed))
    if unknown:
        raise CodecError(f"{kind}: unknown key {unknown[0]!r}")


# the allocation shape's fields (Slurm's -N/--ntasks-per-node/-w/-x/-C/--exclusive/--mem=0/
# --gres=gpu:TYPE); a row written before them reads as their defaults
ALLOC_KEYS = (
    "distinct_nodes",
    "tasks_per_worker",
    "nodelist",
    "exclude",
    "constraint",
    "exclusive",
    "whole_node_memory",
    "gres_type",
    "reservation",
)
_SPEC_KEYS = (
    "name",
    "user",
    "queue",
    "workers",
    "gpus_per_worker",
    "gpu_milli",
    "cpu_milli",
    "memory_mib",
    "gpu_models",
    "time_limit_s",
    "priority",
    "preemptible",
    "topology",
    "dataset",
    "max_retries",
    "command",
    "env",
    "signal",
    "requeue",
    "secrets",
    *ALLOC_KEYS,
    "batch",
    "workdir",
    "output",
    "error",
    "open_mode",
    "input",
    "submit_env",
    "container",
    "queues",
    "checkpoint",
    "min_runtime_s",
    "idle_exempt_s",
    "gpu_engines",
    "kill_invalid_dep",
    "hold",
    "begin_time",
)
# kept with the job, never shown: the environment captured at submit (sbatch's --export)
HIDDEN_SPEC_KEYS = ("submit_env",)


def spec_to_dict(spec: JobSpec) -> dict[str, Any]:
    return {
        "name": spec.name,
        "user": spec.user,
        "queue": spec.queue,
        "workers": spec.workers,
        "gpus_per_worker": spec.gpus_per_worker,
        "gpu_milli": spec.gpu_milli,
        "cpu_milli": spec.cpu_milli,
        "memory_mib": spec.memory_mib,
        "gpu_models": list(spec.gpu_models),
        "time_limit_s": spec.time_limit_s,
        "priority": spec.priority,
        "preemptible": spec.preemptible,
        "topology": {"level": spec.topology.level.value, "required": spec.topology.required},
        "dataset": spec.dataset,
        "max_retries": spec.max_retries,
        "command": list(spec.command),
        "env": [[k, v] for k, v in spec.env],
        "signal": None
        if spec.signal is None
        else {
            "signal": spec.signal.number,
            "before_s": spec.signal.before_s,
            "batch_only": spec.signal.batch_only,
        },
        "requeue": spec.requeue,
        "secrets": [ref_to_dict(r) for r in spec.secrets],
        **_alloc_to_dict(spec),
        "batch": spec.batch,
        "workdir": spec.workdir,
        "output": spec.output,
        "error": spec.error,
        "open_mode": spec.open_mode,
        "input": spec.input,
        "submit_env": [[k, v] for k, v in spec.submit_env],
        "container": None if spec.container is None else spec.container.to_dict(),
        "queues": list(spec.queues),
        "checkpoint": None
        if spec.checkpoint is None
        else {
            "signal": spec.checkpoint.signal,
            "grace_s": spec.checkpoint.grace_s,
            "batch_only": spec.checkpoint.batch_only,
        },
        "min_runtime_s": spec.min_runtime_s,
        "idle_exempt_s": spec.idle_exempt_s,
        "gpu_engines": dict(spec.gpu_engines),
        "kill_invalid_dep": spec.kill_invalid_dep,
        "hold": spec.hold,
        "begin_time": spec.begin_time,
    }


def _alloc_to_dict(spec: JobSpec) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in ALLOC_KEYS:
        value = getattr(spec, key)
        out[key] = list(value) if isinstance(value, tuple) else value
    return out


def in_row_queue(spec: JobSpec, queue: str) -> JobSpec:
    """``spec`` as its row says it runs: a job of several queues started in another than its
    spec names carries the row's queue."""
    if queue != spec.queue and queue in spec.queues:
        return replace(spec, queue=queue)
    return spec


def spec_from_dict(data: Mapping[str, Any]) -> JobSpec:
    _check_keys("job spec", data, _SPEC_KEYS)
    d = dict(data)
    kw: dict[str, Any] = {}
    for key in ("name", "user", "queue", "dataset"):
        if key in d:
            kw[key] = str(d[key])
    for key in ("workers", "gpus_per_worker", "gpu_milli", "cpu_milli", "memory_mib"):
        if key in d:
            kw[key] = int(d[key])
    for key in ("priority", "max_retries"):
        if key in d:
            kw[key] = int(d[key])
    if "gpu_models" in d:
        kw["gpu_models"] = tuple(str(m) for m in d["gpu_models"])
    if d.get("time_limit_s") is not None:
        kw["time_limit_s"] = float(d["time_limit_s"])
    if "preemptible" in d:
        kw["preemptible"] = bool(d["preemptible"])
    if "topology" in d:
        t = d["topology"]
        _check_keys("job spec topology", t, ("level", "required"))
        kw["topology"] = Topology(
            TopologyLevel(t.get("level", "any")), bool(t.get("required", False))
        )
    if "command" in d:
        kw["command"] = tuple(str(c) for c in d["command"])
    if "env" in d:
        kw["env"] = tuple((str(k), str(v)) for k, v in d["env"])
    if d.get("signal") is not None:
        w = d["signal"]
        _check_keys("job spec signal", w, ("signal", "before_s", "batch_only"))
        kw["signal"] = WarningSignal(
            int(w["signal"]), int(w.get("before_s", 60)), bool(w.get("batch_only", False))
        )
    for key in ("requeue", "batch"):
        if key in d:
            kw[key] = bool(d[key])
    for key in ("workdir", "output", "error", "open_mode", "input"):
        if key in d:
            kw[key] = str(d[key])
    if d.get("queues"):
        kw["queues"] = tuple(str(q) for q in d["queues"])
    if "submit_env" in d:
        kw["submit_env"] = tuple((str(k), str(v)) for k, v in d["submit_env"])
    if d.get("secrets"):
        kw["secrets"] = tuple(ref_from_dict(r) for r in d["secrets"])
    for key in ("distinct_nodes", "exclusive", "whole_node_memory"):
        if key in d:
            kw[key] = bool(d[key])
    if "tasks_per_worker" in d:
        kw["tasks_per_worker"] = int(d["tasks_per_worker"])
    for key in ("nodelist", "exclude"):
        if key in d:
            kw[key] = tuple(str(x) for x in d[key])
    for key in ("constraint", "gres_type", "reservation"):
        if key in d:
            kw[key] = str(d[key])
    if d.get("gpu_engines"):
        kw["gpu_engines"] = tuple(sorted((str(k), int(n)) for k, n in d["gpu_engines"].items()))
    if d.get("container") is not None:
        c = d["container"]
        _check_keys("job spec container", c, ("image", "mounts", "workdir"))
        kw["container"] = container_from_dict(c)
    if d.get("checkpoint") is not None:
        c = d["checkpoint"]
        _check_keys("job spec checkpoint", c, ("signal", "grace_s", "batch_only"))
        kw["checkpoint"] = CheckpointNotice(
            int(c["signal"]), int(c.get("grace_s", 60)), bool(c.get("batch_only", False))
        )
    if "min_runtime_s" in d:
        kw["min_runtime_s"] = float(d["min_runtime_s"])
    if "idle_exempt_s" in d:
        kw["idle_exempt_s"] = float(d["idle_exempt_s"])
    if d.get("kill_invalid_dep") is not None:
        kw["kill_invalid_dep"] = bool(d["kill_invalid_dep"])
    if d.get("hold"):
        kw["hold"] = True
    kw["begin_time"] = float(d.get("begin_time") or 0.0)
    return JobSpec(**kw)


def placement_to_dict(p: Placement) -> dict[str, Any]:
    return {
        "node": p.node,
        "gpus": list(p.gpus),
        "gpu_milli": p.gpu_milli,
        "cpu_milli": p.cpu_milli,
        "memory_mib": p.memory_mib,
    }


def placement_from_dict(d: Mapping[str, Any]) -> Placement:
    _check_keys("placement", d, ("node", "gpus", "gpu_milli", "cpu_milli", "memory_mib"))
    return Placement(
        str(d["node"]),
        tuple(int(g) for g in d["gpus"]),
        int(d["gpu_milli"]),
        int(d["cpu_milli"]),
        int(d["memory_mib"]),
    )


def allocation_to_list(allocation: Allocation) -> list[dict[str, Any]]:
    return [placement_to_dict(p) for p in allocation]


def allocation_from_list(items: Iterable[Mapping[str, Any]] | None) -> Allocation:
    return tuple(placement_from_dict(p) for p in items or ())


def node_spec_to_dict(n: NodeSpec) -> dict[str, Any]:
    return {
        "name": n.name,
        "gpu_model": n.gpu_model,
        "gpus": n.gpus,
        "cpu_milli": n.cpu_milli,
        "memory_mib": n.memory_mib,
        "leaf": n.leaf,
        "pod": n.pod,
        "pool": n.pool,
        "nvlink_domain": n.nvlink_domain,
        "labels": [[k, v] for k, v in n.labels],
        "features": list(n.features),
        "gres_type": n.gres_type,
    }


def node_spec_from_dict(d: Mapping[str, Any]) -> NodeSpec:
    keys = ("name", "gpu_model", "gpus", "cpu_milli", "memory_mib", "leaf", "pod", "pool")
    _check_keys("node spec", d, (*keys, "nvlink_domain", "labels", "features", "gres_type"))
    return NodeSpec(
        str(d["name"]),
        str(d["gpu_model"]),
        int(d["gpus"]),
        int(d["cpu_milli"]),
        int(d["memory_mib"]),
        str(d["leaf"]),
        str(d["pod"]),
        str(d.get("pool", "")),
        int(d.get("nvlink_domain", 0)),
        tuple((str(k), str(v)) for k, v in d.get("labels", ())),
        tuple(str(x) for x in d.get("features", ())),
        str(d.get("gres_type", "")),
    )


def queue_to_dict(q: QueueSpec) -> dict[str, Any]:
    return {
        "name": q.name,
        "quota": {
            "gpu_milli": q.quota.gpu_milli,
            "cpu_milli": q.quota.cpu_milli,
            "memory_mib": q.quota.memory_mib,
        },
        "weight": q.weight,
        "cohort": q.cohort,
        "can_borrow": q.can_borrow,
        "can_lend": q.can_lend,
        "preempt_grace_max_s": q.preempt_grace_max_s,
        "priority_max": q.priority_max,
        **({"idle": q.idle.to_dict()} if q.idle is not None else {}),
        **({"defrag": q.defrag.to_dict()} if q.defrag is not None else {}),
        **({"pack_encoders": q.pack_encoders} if q.pack_encoders is not None else {}),
        **({"gpu_sharing": list(q.gpu_sharing)} if q.gpu_sharing else {}),
        **({"nodes": dict(q.nodes)} if q.nodes else {}),
    }


def queue_from_dict(d: Mapping[str, Any]) -> QueueSpec:
    _check_keys(
        "queue",
        d,
        (
            "name",
            "quota",
            "weight",
            "cohort",
            "can_borrow",
            "can_lend",
            "preempt_grace_max_s",
            "priority_max",
            "idle",
            "defrag",
            "pack_encoders",
            "gpu_sharing",
            "nodes",
        ),
    )
    kw: dict[str, Any] = {}
    if "quota" in d:
        q = d["quota"]
        _check_keys("queue quota", q, ("gpu_milli", "cpu_milli", "memory_mib"))
        kw["quota"] = Resources(int(q["gpu_milli"]), int(q["cpu_milli"]), int(q["memory_mib"]))
    if "weight" in d:
        kw["weight"] = float(d["weight"])
    if "cohort" in d:
        kw["cohort"] = str(d["cohort"])
    for key in ("can_borrow", "can_lend"):
        if key in d:
            kw[key] = bool(d[key])
    if "preempt_grace_max_s" in d:
        kw["preempt_grace_max_s"] = float(d["preempt_grace_max_s"])
    if d.get("priority_max") is not None:
        kw["priority_max"] = int(d["priority_max"])
    if "idle" in d:
        kw["idle"] = IdlePolicy.from_dict(d["idle"], source="store", path="queue.idle")
    if "defrag" in d:
        kw["defrag"] = DefragOverrides.from_dict(d["defrag"], source="store", path="queue.defrag")
    if d.get("pack_encoders") is not None:
        kw["pack_encoders"] = bool(d["pack_encoders"])
    if d.get("gpu_sharing"):
        kw["gpu_sharing"] = tuple(str(m) for m in d["gpu_sharing"])
    if d.get("nodes"):
        kw["nodes"] = tuple(sorted((str(k), str(v)) for k, v in d["nodes"].items()))
    return QueueSpec(str(d["name"]), **kw)
