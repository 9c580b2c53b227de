"""One plan from one spec: storage → nodes → racks → fabric → facility → outputs.

Pure: no I/O, no clock. The order follows what each step needs: the local cache (storage) sets
the drives, hence a node's PCIe lanes and power; a node's power sets nodes per rack, which decides
where a leaf can sit in its nodes' rack (DAC); the fabric's switches add network power.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpufleet.model.cluster import ClusterSpec
from gpufleet.model.errors import SpecError
from gpufleet.ops.plan import cluster_yaml, slurm
from gpufleet.ops.plan.bom import BomLine, bill_of_materials
from gpufleet.ops.plan.fabric import FabricMember, FabricPlan, plan_fabric
from gpufleet.ops.plan.findings import PlanWarning
from gpufleet.ops.plan.intent import TOPOLOGIES, PlanSpec, TopologyKind, read_plan_spec
from gpufleet.ops.plan.node import NodePlan, plan_nodes
from gpufleet.ops.plan.power import FacilityPlan, nodes_per_rack, plan_facility
from gpufleet.ops.plan.storage import StoragePlan, plan_storage


@dataclass(frozen=True, slots=True)
class Plan:
    spec: PlanSpec
    nodes: tuple[NodePlan, ...]
    storage: StoragePlan
    fabric: FabricPlan
    alternative: FabricPlan | None  # the same nodes on the other topology, where it fits
    facility: FacilityPlan
    bom: tuple[BomLine, ...]
    warnings: tuple[PlanWarning, ...]
    cluster: dict[str, Any]  # the ClusterSpec document (cluster.yaml)
    cluster_spec: ClusterSpec
    cluster_yaml: str
    topology_conf: str

    @property
    def gpus(self) -> int:
        return sum(n.count * n.gpus for n in self.nodes)

    @property
    def node_count(self) -> int:
        return sum(n.count for n in self.nodes)


def plan_from_data(data: Any, *, source: str) -> Plan:
    """Validate ``data`` (parsed YAML from ``source``) and plan it; SpecError when refused."""
    return make_plan(read_plan_spec(data, source=source))


def make_plan(spec: PlanSpec) -> Plan:
    storage = plan_storage(spec)
    nodes = plan_nodes(spec, storage.cache_drives_per_node)
    rack_fit = {i: nodes_per_rack(n, spec.power)[0] for i, n in enumerate(nodes)}
    members = [
        FabricMember(i, g.name, g.count, n.nics)
        for i, (g, n) in enumerate(zip(spec.groups, nodes, strict=True))
        if n.gpus and n.nics
    ]
    if not members:
        raise SpecError("there are no GPU nodes to plan", source=spec.source)

    def fabric_for(topology: TopologyKind) -> FabricPlan:
        return plan_fabric(
            members,
            spec.network,
            topology=topology,
            link_gbps=spec.node.nic_gbps,
            workload=spec.workload,
            nodes_per_rack=rack_fit,
            source=spec.source,
        )

    fabric = fabric_for(spec.network.topology)
    other = next(t for t in TOPOLOGIES if t != spec.network.topology)
    try:
        alternative: FabricPlan | None = fabric_for(other)
    except SpecError:  # only a comparison: the planned topology is what was asked for
        alternative = None
    facility = plan_facility(nodes, fabric, spec.power, spec.network.switch_w)
    document = cluster_yaml.cluster_document(spec, nodes, fabric)
    # the document must load as the scheduler will load it; a refusal here is a planner bug
    cluster = ClusterSpec.from_dict(document, source=f"plan {spec.name}")
    header = (
        f"ClusterSpec planned by gpufleet plan from {spec.source}:\n"
        f"{len(cluster.nodes)} nodes, {cluster.total_gpus} GPUs, {fabric.topology} fabric,"
        f" {len(fabric.pods)} pod(s), {len(fabric.groups)} leaf groups"
    )
    warnings = (
        _intent_warnings(spec, nodes)
        + tuple(w for n in nodes for w in n.warnings)
        + storage.warnings
        + fabric.warnings
        + facility.warnings
    )
    return Plan(
        spec=spec,
        nodes=nodes,
        storage=storage,
        fabric=fabric,
        alternative=alternative,
        facility=facility,
        bom=bill_of_materials(nodes, fabric, storage, facility),
        warnings=warnings,
        cluster=document,
        cluster_spec=cluster,
        cluster_yaml=cluster_yaml.render(document, header=header),
        topology_conf=slurm.topology_conf(cluster, fabric),
    )


def _intent_warnings(spec: PlanSpec, nodes: tuple[NodePlan, ...]) -> tuple[PlanWarning, ...]:
    if spec.from_cluster:
        return ()
    planned = sum(n.count * n.gpus for n in nodes)
    if planned == spec.requested_gpus:
        return ()
    node = nodes[0]
    return (
        PlanWarning(
            "gpus-rounded",
            node.pool,
            f"{spec.requested_gpus} GPUs wanted, {planned} planned ({node.count} nodes ×"
            f" {node.gpus})",
            "nodes come whole: the GPUs wanted are not a multiple of workload.gpus_per_node",
        ),
    )
