"""The cluster: node pools placed in a fabric tree ``pod → leaf → node``, and the queues.

``ClusterSpec.from_dict`` reads the YAML shape (parsed elsewhere: this package is stdlib only)::

    name: lab
    fabric:                       # optional; without it every node sits in leaf-0 of pod-0
      - pod: pod-a
        leaves: [leaf-1, leaf-2]
    pools:
      - name: h100
        count: 16
        gpu_model: H100-SXM
        gpus: 8
        cpu_cores: 112
        memory_gib: 2048
        nvlink_domain: 8          # GPUs per NVLink domain (default: all GPUs of the node)
        labels: {zone: a}
        features: [ib, nvme]      # Slurm's node features (what -C/--constraint matches)
        gres_type: h100           # the site's GPU type name (default: the model's family)
        gpu_replicas: 4           # each GPU time-sliced as 4 replicas (model/replicas.py)
        pack_encoders: false      # video jobs beside training here? (default: the controller's)
        leaves: [leaf-1, leaf-2]  # nodes are spread evenly over these, in order
    queues:
      - name: vision
        cohort: research
        weight: 1
        quota: {gpus: 64, cpu_cores: 900, memory_gib: 16000}
        pack_encoders: false      # its video jobs beside training? (a false of queue or pool wins)
        gpu_sharing: [mps]        # its GPU shares only on nodes sharing GPUs so (default: any)
    heal:                       # the heal loop (model/heal.py); absent: off
      max_failures: 3
      window_s: 86400
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from gpufleet.model import catalog, replicas
from gpufleet.model.elastic import ElasticPool, check_no_count, read_elastic
from gpufleet.model.engines import PACK_LABEL
from gpufleet.model.errors import SpecError
from gpufleet.model.heal import HealPolicy
from gpufleet.model.queue import QueueSpec
from gpufleet.model.resources import MILLI
from gpufleet.model.validate import Fields, require_unique

DEFAULT_POD = "pod-0"
DEFAULT_LEAF = "leaf-0"


@dataclass(frozen=True, slots=True)
class NodeSpec:
    name: str
    gpu_model: str  # canonical catalog name, or a trace's own model string
    gpus: int
    cpu_milli: int
    memory_mib: int
    leaf: str
    pod: str
    pool: str = ""
    nvlink_domain: int = 0  # GPUs per NVLink domain; 0 = the whole node
    labels: tuple[tuple[str, str], ...] = ()
    features: tuple[str, ...] = ()  # Slurm's node features (-C/--constraint)
    gres_type: str = ""  # the site's GPU type name; "" = the catalog's default for the model

    @property
    def gpu_type(self) -> str:
        """The GPU type name ``--gres=gpu:TYPE`` matches on this node."""
        return self.gres_type or catalog.gres_name(self.gpu_model)

    @property
    def label_map(self) -> dict[str, str]:
        return dict(self.labels)


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    name: str
    nodes: tuple[NodeSpec, ...]
    leaves: tuple[tuple[str, str], ...]  # (leaf, pod), in fabric order
    queues: tuple[QueueSpec, ...] = ()
    source: str = field(default="", compare=False)
    heal: HealPolicy | None = None  # the heal loop's policy (``heal:``); None: no heal loop
    # pools whose nodes come and go (model/elastic.py); ``nodes`` holds none of theirs
    elastic: tuple[ElasticPool, ...] = ()

    @property
    def total_gpus(self) -> int:
        return sum(n.gpus for n in self.nodes)

    @property
    def leaf_pod(self) -> dict[str, str]:
        return dict(self.leaves)

    def queue(self, name: str) -> QueueSpec | None:
        return next((q for q in self.queues if q.name == name), None)

    @staticmethod
    def from_dict(data: Any, *, source: str = "<cluster>") -> ClusterSpec:
        top = Fields(data, source=source, path="")
        name = top.text("name", "cluster")
        leaves = _read_fabric(top)
        leaf_pod = dict(leaves)
        nodes: list[NodeSpec] = []
        elastic: list[ElasticPool] = []
        pools = top.items("pools")
        for i, raw in enumerate(pools):
            got = _read_pool(raw, source=source, path=f"pools[{i}]", leaf_pod=leaf_pod)
            if isinstance(got, ElasticPool):
                elastic.append(got)
            else:
                nodes.extend(got)
        for i, raw in enumerate(top.items("nodes")):
            nodes.append(_read_node(raw, source=source, path=f"nodes[{i}]", leaf_pod=leaf_pod))
        if not nodes and not elastic:
            raise SpecError("the cluster has no nodes (give pools or nodes)", source=source)
        every_node = [*nodes, *(n for p in elastic for n in p.nodes)]
        require_unique((n.name for n in every_node), source=source, field="pools", what="node")
        queues = tuple(
            QueueSpec.from_dict(q, source=source, path=f"queues[{i}]")
            for i, q in enumerate(top.items("queues"))
        )
        require_unique((q.name for q in queues), source=source, field="queues", what="queue")
        heal = None
        if top.has("heal"):
            heal = HealPolicy.from_dict(top.raw("heal"), source=source, path="heal")
        top.finish()
        return ClusterSpec(
            name, tuple(nodes), tuple(leaves), queues, source, heal, elastic=tuple(elastic)
        )

    @staticmethod
    def build(
        name: str,
        nodes: Iterable[NodeSpec],
        queues: Iterable[QueueSpec] = (),
    ) -> ClusterSpec:
        """A spec from nodes already made (traces, tests); leaves in first-seen order."""
        ns = tuple(nodes)
        seen: dict[str, str] = {}
        for n in ns:
            seen.setdefault(n.leaf, n.pod)
        return ClusterSpec(name, ns, tuple(seen.items()), tuple(queues))


def _read_fabric(top: Fields) -> list[tuple[str, str]]:
    fabric = top.items("fabric")
    if not fabric:
        return [(DEFAULT_LEAF, DEFAULT_POD)]
    out: list[tuple[str, str]] = []
    for i, raw in enumerate(fabric):
        f = Fields(raw, source=top.source, path=f"fabric[{i}]")
        pod = f.text("pod", required=True)
        leaves = f.names("leaves")
        if not leaves:
            raise f.error("leaves", "a pod needs at least one leaf")
        f.finish()
        out.extend((leaf, pod) for leaf in leaves)
    require_unique((leaf for leaf, _ in out), source=top.source, field="fabric", what="leaf")
    return out


def _placement(f: Fields, count: int, leaf_pod: dict[str, str]) -> list[tuple[str, str]]:
    """Leaf and pod for each of ``count`` nodes, spread evenly over the pool's leaves."""
    leaves = f.names("leaves") or ((f.text("leaf"),) if f.has("leaf") else ())
    if not leaves:
        if len(leaf_pod) == 1:
            leaves = tuple(leaf_pod)
        else:
            raise f.error("leaves", "the node is in no leaf: name one of " + ", ".join(leaf_pod))
    for leaf in leaves:
        if leaf not in leaf_pod:
            raise f.error("leaves", f"leaf {leaf!r} is not in the fabric ({', '.join(leaf_pod)})")
    out = []
    for i in range(count):
        leaf = leaves[i * len(leaves) // count] if count else leaves[0]
        out.append((leaf, leaf_pod[leaf]))
    return out


def _gpu_fields(f: Fields) -> tuple[str, int, int, int, int]:
    gpus = f.integer("gpus", 0, minimum=0, maximum=64)
    model = ""
    if gpus:
        model = catalog.lookup(
            f.text("gpu_model", required=True), source=f.source, field=f.field("gpu_model")
        ).name
    elif f.has("gpu_model"):
        f.text("gpu_model")
    cpu = f.number("cpu_cores", minimum=0, maximum=100_000)
    mem = f.number("memory_gib", minimum=0, maximum=1 << 20)
    nvl = f.integer("nvlink_domain", 0, minimum=0, maximum=max(gpus, 0))
    return model, gpus, round(cpu * MILLI), round(mem * 1024), nvl


def _replicas(f: Fields, gpus: int) -> dict[str, str]:
    """The labels of a pool whose GPUs are time-sliced as ``gpu_replicas`` each."""
    if not f.has("gpu_replicas"):
        return {}
    n = f.integer("gpu_replicas", minimum=2, maximum=replicas.MAX_REPLICAS)
    if not gpus:
        raise f.error("gpu_replicas", "needs GPUs to time-slice (the pool has gpus: 0)")
    return replicas.labels(n)


def _packing(f: Fields) -> dict[str, str]:
    """The label of a pool that packs video jobs beside training, or keeps them apart, whatever
    the controller's --pack-encoders (scheduler/pack_encoders.py)."""
    if not f.has("pack_encoders"):
        return {}
    return {PACK_LABEL: "true" if f.flag("pack_encoders", False) else "false"}


def _read_pool(
    raw: Any, *, source: str, path: str, leaf_pod: dict[str, str]
) -> list[NodeSpec] | ElasticPool:
    f = Fields(raw, source=source, path=path)
    pool = f.text("name", required=True)
    elastic = None
    if f.has("elastic"):
        check_no_count(f)
        elastic = read_elastic(f)
        count = elastic.max
    else:
        count = f.integer("count", minimum=0)
    model, gpus, cpu, mem, nvl = _gpu_fields(f)
    labels = tuple(sorted({**f.labels("labels"), **_replicas(f, gpus), **_packing(f)}.items()))
    features, gres_type = _features(f, gpus)
    prefix = f.text("prefix", pool)
    places = _placement(f, count, leaf_pod)
    f.finish()
    width = max(3, len(str(count - 1)))
    specs = [
        NodeSpec(
            f"{prefix}-{i:0{width}d}",
            model,
            gpus,
            cpu,
            mem,
            leaf,
            pod,
            pool,
            nvl,
            labels,
            features,
            gres_type,
        )
        for i, (leaf, pod) in enumerate(places)
    ]
    return specs if elastic is None else ElasticPool(pool, elastic, tuple(specs))


MAX_FEATURES = 64
_FEATURE = re.compile(r"[A-Za-z0-9_.:+/-]{1,64}")


def check_features(names: Iterable[str]) -> tuple[str, ...]:
    """Feature names as Slurm's -C can name them (letters, digits, _ . : + / -); ValueError
    names the first bad one."""
    out = tuple(dict.fromkeys(names))
    if len(out) > MAX_FEATURES:
        raise ValueError(f"at most {MAX_FEATURES} features, got {len(out)}")
    for n in out:
        if not _FEATURE.fullmatch(n):
            raise ValueError(
                f"feature {n!r}: 1 to 64 letters, digits or _ . : + / - (no spaces, & | [ ] ( ))"
            )
    return out


def _features(f: Fields, gpus: int) -> tuple[tuple[str, ...], str]:
    try:
        features = check_features(f.names("features"))
    except ValueError as e:
        raise f.error("features", str(e)) from None
    gres_type = f.text("gres_type", "").strip().lower()
    if gres_type and not gpus:
        raise f.error("gres_type", "a node without GPUs has no GPU type")
    if gres_type and not _FEATURE.fullmatch(gres_type):
        raise f.error("gres_type", f"{gres_type!r}: letters, digits or _ . : + / -")
    return features, gres_type


def _read_node(raw: Any, *, source: str, path: str, leaf_pod: dict[str, str]) -> NodeSpec:
    f = Fields(raw, source=source, path=path)
    name = f.text("name", required=True)
    model, gpus, cpu, mem, nvl = _gpu_fields(f)
    labels = tuple(sorted(f.labels("labels").items()))
    features, gres_type = _features(f, gpus)
    ((leaf, pod),) = _placement(f, 1, leaf_pod)
    f.finish()
    return NodeSpec(name, model, gpus, cpu, mem, leaf, pod, "", nvl, labels, features, gres_type)
