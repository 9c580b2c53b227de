"""The GPU series: dcgm-exporter's fields per GPU (with the jobs holding it as labels, as its
HPC job mapping does), the last XID, each GPU's health, and how much of what is allocated is
in use. Read from the agents' latest heartbeats and the core's nodes and running jobs."""

from __future__ import annotations

from collections.abc import Mapping

from gpufleet.core.controller import Controller
from gpufleet.core.state import NodeRuntime
from gpufleet.model.resources import MILLI
from gpufleet.server.metrics.catalog import DCGM_METRICS, ENCODER_METRICS
from gpufleet.server.metrics.text import Family, LabelOf, Pairs, num, one, value
from gpufleet.server.service.links import NodeLink

GpuKey = tuple[str, int]  # (node, GPU index)


def job_pairs(jid: str, queue: str, user: str, users: bool) -> Pairs:
    """A job's labels, as dcgm-exporter's HPC job mapping gives them, with its ``user`` only
    where ``users`` (a public /metrics names no user unless its controller is told to)."""
    if users:
        return (("hpc_job", jid), ("queue", queue), ("user", user))
    return (("hpc_job", jid), ("queue", queue))


def holders(ctrl: Controller, users: bool = True) -> dict[GpuKey, list[Pairs]]:
    """(node, GPU index) → the job label pairs of each job holding that GPU."""
    out: dict[GpuKey, list[Pairs]] = {}
    for jid, r in ctrl.running.items():
        jl = job_pairs(jid, r.spec.queue, r.spec.user, users)
        for p in r.allocation:
            for d in p.gpus:
                out.setdefault((p.node, d), []).append(jl)
    return out


def gpu_families(
    ctrl: Controller,
    links: Mapping[str, NodeLink],
    lab: LabelOf,
    only: str | None = None,
    users: bool = True,
) -> tuple[list[Family], dict[GpuKey, float]]:
    """The GPU families (of every node, or ``only`` that one) and each GPU's utilization;
    ``users``: the jobs' labels name their users."""
    fams = {
        name: Family(name, kind, help_)
        for name, (kind, help_) in (DCGM_METRICS | ENCODER_METRICS).items()
    }
    per_job, xid_info, healthy = _own_families()
    held = holders(ctrl, users)
    samples_of = {name: f.samples for name, f in fams.items()}
    util: dict[GpuKey, float] = {}
    for name in sorted(ctrl.nodes) if only is None else [only]:
        node = ctrl.nodes[name]
        link = links.get(name)
        if node.lost or link is None:
            continue
        node_labels = (
            ("Hostname", name),
            ("hostname", name),
            ("DCGM_FI_DRIVER_VERSION", link.driver_version),
        )
        gpus = link.metrics.get("gpus") if isinstance(link.metrics, dict) else None
        seen: dict[int, str] = {}  # GPU index → UUID
        for g in gpus if isinstance(gpus, list) else []:
            if not isinstance(g, dict):
                continue
            lab_in, values = g.get("labels"), g.get("values")
            if not isinstance(lab_in, dict) or not isinstance(values, dict):
                continue
            idx_text = str(lab_in.get("gpu", ""))
            if not (idx_text.isascii() and idx_text.isdigit()):
                continue
            idx = int(idx_text)
            uuid = str(lab_in.get("UUID", ""))
            base = (
                ("gpu", idx_text),
                ("UUID", uuid),
                ("pci_bus_id", str(lab_in.get("pci_bus_id", ""))),
                ("device", f"nvidia{idx_text}"),
                ("modelName", str(lab_in.get("modelName", ""))),
                *node_labels,
            )
            seen[idx] = uuid
            jobs = held.get((name, idx))
            label_sets = [lab(base + j) for j in jobs] if jobs else [lab(base)]
            for metric, raw in values.items():  # the hot loop: ~200,000 per big scrape
                out = samples_of.get(metric)
                t = type(raw)
                if out is None or (t is not int and t is not float):
                    continue
                for ls in label_sets:
                    out.append((metric, ls, raw))
            _job_use(per_job, lab, g.get("jobs"), ctrl, base[:2] + node_labels[:1], users)
            u = value(values.get("DCGM_FI_DEV_GPU_UTIL"))
            if u is not None:
                util[(name, idx)] = u
            xid = value(values.get("DCGM_FI_DEV_XID_ERRORS"))
            if xid:
                short = (("gpu", idx_text), ("UUID", uuid), ("Hostname", name))
                xid_info.add(lab((*short, ("xid", num(xid)))), 1)
        _gpu_health(healthy, lab, name, node, seen)
    return [*fams.values(), per_job, xid_info, healthy], util


def _own_families() -> tuple[Family, Family, Family]:
    """gpufleet's own GPU families: each job's engines, the last XID, the health."""
    per_job = Family(
        "gpufleet_job_gpu_utilization_percent",
        "gauge",
        "Each job's share of a GPU's engines (sm, memory, encoder, decoder), from the driver's "
        "per-process utilization: on a shared GPU, what this job itself uses.",
    )
    xid_info = Family(
        "gpufleet_gpu_last_xid_info",
        "gauge",
        "1 for the last XID each GPU reported (its DCGM_FI_DEV_XID_ERRORS as a label).",
    )
    healthy = Family(
        "gpufleet_gpu_healthy",
        "gauge",
        "1 while the GPU passes its node's health checks; 0 once a check marked it bad.",
    )
    return per_job, xid_info, healthy


def _job_use(
    fam: Family, lab: LabelOf, jobs: object, ctrl: Controller, gpu: Pairs, users: bool
) -> None:
    """A GPU's ``jobs`` (the agent's: each job's engine shares) as series, for the jobs that
    run here now (a job that ended since the sample is left out)."""
    for j in jobs if isinstance(jobs, list) else []:
        if not isinstance(j, dict) or not isinstance(j.get("util"), dict):
            continue
        jid = str(j.get("job"))
        r = ctrl.running.get(jid)
        if r is None:
            continue
        jl = job_pairs(jid, r.spec.queue, r.spec.user, users)
        for engine, v in j["util"].items():
            if engine in ENGINES and type(v) in (int, float):
                fam.add(lab((*gpu, ("engine", engine), *jl)), v)


ENGINES = frozenset({"sm", "memory", "encoder", "decoder"})  # agent/gpu.py's ENGINES


def _gpu_health(
    healthy: Family, lab: LabelOf, name: str, node: NodeRuntime, seen: Mapping[int, str]
) -> None:
    for idx in range(max(node.spec.gpus, max(seen, default=-1) + 1)):
        # a node-wide failure (no GPU named) counts against every GPU of it
        ok = node.healthy or (bool(node.bad_gpus) and idx not in node.bad_gpus)
        pairs = (("gpu", str(idx)), ("UUID", seen.get(idx, "")), ("Hostname", name))
        healthy.add(lab(pairs), int(ok))


def allocation_families(
    ctrl: Controller,
    util: Mapping[GpuKey, float],
    lab: LabelOf,
    idle_util_pct: float,
    users: bool = True,
) -> list[Family]:
    """What is allocated, and how much of it sits idle (under ``idle_util_pct``)."""
    idle = Family(
        "gpufleet_gpu_allocated_idle",
        "gauge",
        f"Per allocated GPU: 1 while its utilization is under {idle_util_pct:g} %, else 0.",
    )
    allocated = 0.0
    allocated_idle = 0
    seen: set[GpuKey] = set()
    for jid, r in ctrl.running.items():
        jl = job_pairs(jid, r.spec.queue, r.spec.user, users)
        for p in r.allocation:
            allocated += len(p.gpus) * p.gpu_milli / MILLI
            for d in p.gpus:
                u = util.get((p.node, d))
                if u is None:
                    continue
                is_idle = u < idle_util_pct
                idle.add(lab((("gpu", str(d)), ("Hostname", p.node), *jl)), int(is_idle))
                if is_idle and (p.node, d) not in seen:
                    allocated_idle += 1
                seen.add((p.node, d))
    total = sum(n.spec.gpus for n in ctrl.nodes.values() if not n.lost)
    schedulable = sum(n.spec.gpus for n in ctrl.nodes.values() if n.schedulable)
    in_use = sum(1 for u in util.values() if u >= idle_util_pct)
    return [
        one("gpufleet_gpus", "GPUs on the nodes that are not lost.", total),
        one(
            "gpufleet_gpus_schedulable",
            "GPUs on nodes that take new work (healthy, not drained, not lost).",
            schedulable,
        ),
        one("gpufleet_gpus_allocated", "GPUs allocated to jobs (fractions add up).", allocated),
        one(
            "gpufleet_gpus_in_use",
            f"GPUs whose utilization is at least {idle_util_pct:g} %, allocated or not.",
            in_use,
        ),
        one(
            "gpufleet_gpus_allocated_idle",
            f"Allocated GPUs whose utilization is under {idle_util_pct:g} %.",
            allocated_idle,
        ),
        idle,
    ]
