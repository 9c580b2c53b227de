"""The plan spec: a workload intent or a concrete cluster, plus plan options; all validated.

Two shapes (``gpufleet plan --help`` and ``examples/plan-*.yaml`` show both)::

    name: llm-256                 # an intent: the planner sizes the nodes
    workload: {kind: training, gpus: 2048, gpu_model: H100, gpus_per_node: 8}
    model: {parameters: 70B, bytes_per_param: 2, optimizer: adam}
    storage: {dataset_tb: 100, checkpoint_interval_min: 60, checkpoints_kept: 5}
    node: {nic_gbps: 400}
    network: {topology: rail-optimized, switch_radix: 64, oversubscription: 1}
    power: {rack_kw: 40}

    name: lab-plan                # a concrete cluster: its pools are checked, not sized
    workload: {kind: training}
    cluster: {name: lab, pools: [...], queues: [...]}   # as ClusterSpec.from_dict reads it
    network: {...}

A plain cluster spec (``pools`` at the top) is planned with the default options.
Every refusal is a SpecError naming the file and the field.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal, TypeVar

from gpufleet.model import catalog
from gpufleet.model.catalog import GpuModel
from gpufleet.model.cluster import ClusterSpec, NodeSpec
from gpufleet.model.errors import SpecError
from gpufleet.model.resources import MILLI
from gpufleet.model.validate import Fields
from gpufleet.ops.plan import assumptions as A

Workload = Literal["training", "inference"]
TopologyKind = Literal["rail-optimized", "spine-leaf"]
WORKLOADS: tuple[Workload, ...] = ("training", "inference")
TOPOLOGIES: tuple[TopologyKind, ...] = ("rail-optimized", "spine-leaf")


@dataclass(frozen=True, slots=True)
class NodeGroup:
    """Nodes of one hardware shape planned together: a pool, or explicit nodes alike."""

    name: str  # the pool's name; "nodes" for a cluster's explicit nodes
    count: int
    gpu: GpuModel | None  # None: a CPU-only node (login, services), off the GPU fabric
    gpus: int
    cpu_cores: float | None  # None: the plan picks (an intent)
    memory_gib: float | None
    entries: tuple[Mapping[str, Any], ...] = ()  # the input's pool mapping, or node mappings
    is_pool: bool = True


@dataclass(frozen=True, slots=True)
class ModelSpec:
    parameters: float  # 0: not given, no checkpoints
    bytes_per_param: float  # the weights as saved (bf16: 2)
    optimizer: str
    optimizer_bytes_per_param: float


@dataclass(frozen=True, slots=True)
class StorageOptions:
    dataset_tb: float
    checkpoint_interval_min: float  # 0: no checkpoints
    checkpoints_kept: int
    checkpoint_write_share: float  # of the interval that one checkpoint write may take
    capacity_headroom: float  # free space kept on the shared filesystem
    cache_headroom: float  # local cache beyond the node's dataset shard
    nvme_drive_tb: float
    min_nvme_drives: int
    nvme_bays: int


@dataclass(frozen=True, slots=True)
class NodeOptions:
    platform: A.CpuPlatform
    cpu_cores: float | None  # an intent's override of the platform's cores
    memory_gib: float | None  # an intent's override of the planned memory
    cores_per_gpu: int
    nics: int | None  # compute NICs per node; None: by workload (one per GPU for training)
    nic_gbps: int
    frontend_nics: int
    frontend_nic_gbps: int
    pcie_switches: bool | None  # None: by the GPU's form factor (SXM/OAM: yes)
    rack_units: int | None  # node height; None: by form factor


@dataclass(frozen=True, slots=True)
class NetworkOptions:
    topology: TopologyKind
    switch_radix: int
    oversubscription: Fraction  # leaf downlinks : uplinks
    switch_w: int


@dataclass(frozen=True, slots=True)
class PowerOptions:
    rack_kw: float
    rack_units: int
    overhead_factor: float
    liquid_above_rack_kw: float
    liquid_from_gpu_w: int


@dataclass(frozen=True, slots=True)
class PlanSpec:
    name: str
    cluster_name: str  # the ClusterSpec's: a given cluster's own name, else the plan's
    source: str
    workload: Workload
    groups: tuple[NodeGroup, ...]
    from_cluster: bool
    requested_gpus: int  # an intent's GPUs wanted; a cluster's GPUs
    model: ModelSpec
    storage: StorageOptions
    node: NodeOptions
    network: NetworkOptions
    power: PowerOptions
    queues: tuple[Mapping[str, Any], ...] = ()  # a cluster's queues, passed through

    @property
    def gpu_groups(self) -> tuple[NodeGroup, ...]:
        return tuple(g for g in self.groups if g.gpu is not None and g.gpus > 0)


def read_plan_spec(data: Any, *, source: str) -> PlanSpec:
    bare = (
        isinstance(data, Mapping)
        and not {"workload", "cluster"} & set(data)
        and ("pools" in data or "nodes" in data)
    )
    if bare:  # a plain cluster spec: planned with the default options
        return _read(Fields({"cluster": data}, source=source, path=""), bare=True)
    return _read(Fields(data, source=source, path=""), bare=False)


def _read(top: Fields, *, bare: bool) -> PlanSpec:
    source = top.source
    if not top.has("workload") and not top.has("cluster"):
        raise SpecError("give a workload (an intent to size) or a cluster (pools)", source=source)
    work = Fields(top.raw("workload") or {}, source=source, path="workload")
    kind = _choice(work, "kind", WORKLOADS, "training")
    queues: tuple[Mapping[str, Any], ...] = ()
    if top.has("cluster"):
        for key in ("gpus", "gpu_model", "gpus_per_node", "pool"):
            if work.has(key):
                raise work.error(key, "comes from the cluster's pools when a cluster is given")
        groups, cluster_name, queues = _cluster_groups(top, bare=bare)
        requested = sum(g.count * g.gpus for g in groups)
    else:
        groups, requested = _intent_groups(work)
        cluster_name = ""
    work.finish()
    name = top.text("name", cluster_name or "plan")
    model = _model(Fields(top.raw("model") or {}, source=source, path="model"), kind)
    storage = _storage(Fields(top.raw("storage") or {}, source=source, path="storage"), kind)
    node = _node(
        Fields(top.raw("node") or {}, source=source, path="node"), kind, top.has("cluster")
    )
    network = _network(Fields(top.raw("network") or {}, source=source, path="network"), kind)
    power = _power(Fields(top.raw("power") or {}, source=source, path="power"))
    top.finish()
    return PlanSpec(
        name=name,
        cluster_name=cluster_name or name,
        source=source,
        workload=kind,
        groups=groups,
        from_cluster=top.has("cluster"),
        requested_gpus=requested,
        model=model,
        storage=storage,
        node=node,
        network=network,
        power=power,
        queues=queues,
    )


def _intent_groups(work: Fields) -> tuple[tuple[NodeGroup, ...], int]:
    gpus = work.integer("gpus", minimum=1)
    gpu = catalog.lookup(
        work.text("gpu_model", required=True), source=work.source, field=work.field("gpu_model")
    )
    per_node = work.integer("gpus_per_node", 8, minimum=1, maximum=64)
    pool = work.text("pool", gpu.name.lower())
    count = math.ceil(gpus / per_node)
    return (NodeGroup(pool, count, gpu, per_node, None, None),), gpus


def _cluster_groups(
    top: Fields, *, bare: bool
) -> tuple[tuple[NodeGroup, ...], str, tuple[Mapping[str, Any], ...]]:
    raw = top.raw("cluster")
    prefix = "" if bare else "cluster"
    try:
        spec = ClusterSpec.from_dict(raw, source=top.source)
    except SpecError as e:
        field = ".".join(p for p in (prefix, e.field) if p)
        raise SpecError(e.reason, source=e.source or top.source, field=field) from None
    assert isinstance(raw, Mapping)  # from_dict refused anything else
    by_pool: dict[str, list[NodeSpec]] = {}
    for n in spec.nodes:
        by_pool.setdefault(n.pool, []).append(n)
    groups: list[NodeGroup] = []
    for entry in raw.get("pools") or []:
        nodes = by_pool.get(str(entry["name"]).strip(), [])
        if nodes:
            groups.append(_group(str(entry["name"]).strip(), nodes, (entry,), is_pool=True))
    # explicit nodes: one group per hardware shape, so that alike nodes share leaves
    shapes: dict[tuple[str, int, int, int], list[tuple[NodeSpec, Mapping[str, Any]]]] = {}
    explicit = [n for n in spec.nodes if n.pool == ""]
    for n, entry in zip(explicit, raw.get("nodes") or [], strict=True):
        shapes.setdefault((n.gpu_model, n.gpus, n.cpu_milli, n.memory_mib), []).append((n, entry))
    for members in shapes.values():
        nodes = [n for n, _ in members]
        entries = tuple(e for _, e in members)
        name = f"nodes-{nodes[0].gpu_model.lower() or 'cpu'}"
        groups.append(_group(name, nodes, entries, is_pool=False))
    return tuple(groups), spec.name, tuple(raw.get("queues") or ())


def _group(
    name: str, nodes: Sequence[NodeSpec], entries: tuple[Mapping[str, Any], ...], *, is_pool: bool
) -> NodeGroup:
    first = nodes[0]
    gpu = catalog.find(first.gpu_model) if first.gpus else None
    return NodeGroup(
        name=name,
        count=len(nodes),
        gpu=gpu,
        gpus=first.gpus,
        cpu_cores=first.cpu_milli / MILLI,
        memory_gib=first.memory_mib / 1024,
        entries=entries,
        is_pool=is_pool,
    )


def _model(f: Fields, kind: Workload) -> ModelSpec:
    params = _count(f, "parameters")
    bytes_per_param = f.number("bytes_per_param", 2.0, minimum=0.125)
    optimizer = _choice(f, "optimizer", tuple(A.OPTIMIZER_BYTES), _default_optimizer(kind))
    opt_bytes = f.number(
        "optimizer_bytes_per_param", float(A.OPTIMIZER_BYTES[optimizer]), minimum=0
    )
    f.finish()
    return ModelSpec(params, bytes_per_param, optimizer, opt_bytes)


def _default_optimizer(kind: Workload) -> str:
    return "adam" if kind == "training" else "none"


def _storage(f: Fields, kind: Workload) -> StorageOptions:
    interval = f.number("checkpoint_interval_min", 60.0 if kind == "training" else 0.0, minimum=0)
    share = f.number("checkpoint_write_share", 0.05, minimum=0)
    if not 0 < share <= 1:
        raise f.error("checkpoint_write_share", f"must be above 0 and at most 1, got {share}")
    min_drives = f.integer("min_nvme_drives", A.MIN_CACHE_DRIVES, minimum=0, maximum=64)
    out = StorageOptions(
        dataset_tb=f.number("dataset_tb", 0.0, minimum=0),
        checkpoint_interval_min=interval,
        checkpoints_kept=f.integer("checkpoints_kept", 3, minimum=1, maximum=1000),
        checkpoint_write_share=share,
        capacity_headroom=f.number("capacity_headroom", 0.25, minimum=0),
        cache_headroom=f.number("cache_headroom", 1.0, minimum=0),
        nvme_drive_tb=_positive(f, "nvme_drive_tb", A.CACHE_DRIVE_TB),
        min_nvme_drives=min_drives,
        nvme_bays=f.integer("nvme_bays", max(A.CACHE_DRIVE_BAYS, min_drives), minimum=min_drives),
    )
    f.finish()
    return out


def _node(f: Fields, kind: Workload, from_cluster: bool) -> NodeOptions:
    if from_cluster:
        for key in ("cpu_cores", "memory_gib"):
            if f.has(key):
                raise f.error(key, "comes from the cluster's pools when a cluster is given")
    platform = A.PLATFORMS[_choice(f, "platform", tuple(A.PLATFORMS), A.DEFAULT_PLATFORM)]
    cpu = f.number("cpu_cores", minimum=1) if f.has("cpu_cores") else None
    memory = f.number("memory_gib", minimum=1) if f.has("memory_gib") else None
    nics = f.integer("nics", minimum=1, maximum=64) if f.has("nics") else None
    switches = f.flag("pcie_switches", False) if f.has("pcie_switches") else None
    units = f.integer("rack_units", minimum=1, maximum=48) if f.has("rack_units") else None
    out = NodeOptions(
        platform=platform,
        cpu_cores=cpu,
        memory_gib=memory,
        cores_per_gpu=f.integer("cpu_cores_per_gpu", A.CORES_PER_GPU[kind], minimum=0),
        nics=nics,
        nic_gbps=f.integer("nic_gbps", 400, minimum=1, maximum=3200),
        frontend_nics=f.integer("frontend_nics", 1, minimum=0, maximum=8),
        frontend_nic_gbps=f.integer("frontend_nic_gbps", 100, minimum=1, maximum=3200),
        pcie_switches=switches,
        rack_units=units,
    )
    f.finish()
    return out


def _network(f: Fields, kind: Workload) -> NetworkOptions:
    default_topology: TopologyKind = "rail-optimized" if kind == "training" else "spine-leaf"
    topology = _choice(f, "topology", TOPOLOGIES, default_topology)
    out = NetworkOptions(
        topology=topology,
        switch_radix=f.integer("switch_radix", 64, minimum=4, maximum=1024),
        oversubscription=_ratio(f, "oversubscription"),
        switch_w=f.integer("switch_w", A.SWITCH_W, minimum=0),
    )
    f.finish()
    return out


def _power(f: Fields) -> PowerOptions:
    out = PowerOptions(
        rack_kw=_positive(f, "rack_kw", 40.0),
        rack_units=f.integer("rack_units", 42, minimum=1, maximum=60),
        overhead_factor=f.number("overhead_factor", A.NODE_OVERHEAD_FACTOR, minimum=1),
        liquid_above_rack_kw=_positive(f, "liquid_above_rack_kw", 40.0),
        liquid_from_gpu_w=f.integer("liquid_from_gpu_w", 700, minimum=1),
    )
    f.finish()
    return out


# --- value readers --------------------------------------------------------------------------


_Choice = TypeVar("_Choice", bound=str)


def _choice(f: Fields, key: str, allowed: tuple[_Choice, ...], default: _Choice) -> _Choice:
    value = f.text(key, default).lower()
    for a in allowed:
        if a == value:
            return a
    raise f.error(key, f"must be one of {', '.join(allowed)}, got {value!r}")


def _positive(f: Fields, key: str, default: float) -> float:
    v = f.number(key, default, minimum=0)
    if v <= 0:
        raise f.error(key, f"must be above 0, got {v}")
    return v


_SCALE = {"": 1.0, "K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12}
_COUNT = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([KMBGT]?)\s*$", re.IGNORECASE)


def _count(f: Fields, key: str) -> float:
    """A count such as 70000000000, 7e10, "70B", "1.8T" or "340M"; 0 when absent."""
    v = f.raw(key)
    if v is None:
        return 0.0
    if isinstance(v, bool) or not isinstance(v, int | float | str):
        raise f.error(key, f"must be a number such as 70e9 or 70B, got {v!r}")
    if isinstance(v, str):
        m = _COUNT.match(v)
        if m is None:
            raise f.error(key, f"must be a number such as 70e9 or 70B, got {v!r}")
        v = float(m.group(1)) * _SCALE[m.group(2).upper()]
    if v <= 0:
        raise f.error(key, f"must be above 0, got {v}")
    return float(v)


def _ratio(f: Fields, key: str) -> Fraction:
    """Oversubscription as downlinks per uplink: 1 (non-blocking), 2, 1.5 or "3:1"."""
    v = f.raw(key)
    if v is None:
        return Fraction(1)
    try:
        if isinstance(v, bool):
            raise ValueError
        if isinstance(v, str) and ":" in v:
            down, up = (Fraction(p.strip()) for p in v.split(":", 1))
            ratio = down / up
        elif isinstance(v, int | float | str):
            ratio = Fraction(str(v))
        else:
            raise ValueError
    except (ValueError, ZeroDivisionError):
        raise f.error(key, f"must be a ratio such as 1, 2 or '3:1', got {v!r}") from None
    if ratio < 1:
        raise f.error(key, f"must be at least 1 (1:1, non-blocking), got {v!r}")
    return ratio.limit_denominator(1000)
