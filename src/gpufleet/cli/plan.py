"""`gpufleet plan SPEC.yaml [--json] [--out DIR]`: nodes, fabric, storage, racks, power, BOM."""

from __future__ import annotations

from pathlib import Path

import typer

from gpufleet.cli import output
from gpufleet.io.specs import load_yaml
from gpufleet.model.errors import SpecError
from gpufleet.ops.plan import Plan, plan_from_data, report

OUTPUT_FILES = ("bom.csv", "cluster.yaml", "topology.conf", "plan.md")


def plan(
    spec: Path = typer.Argument(..., help="plan spec: a workload intent, or a cluster and options"),
    as_json: bool = typer.Option(False, "--json", help="one JSON document on stdout"),
    out: Path | None = typer.Option(
        None, "--out", help="write bom.csv, cluster.yaml, topology.conf and plan.md into DIR"
    ),
) -> None:
    """Plan a GPU cluster from a workload intent (GPUs, model, dataset, checkpoints) or check a
    concrete cluster spec: node memory, cores, PCIe and NICs; a spine-leaf or rail-optimized
    fabric; shared storage and local cache; racks, power and cooling; a bill of materials; the
    ClusterSpec and Slurm topology.conf. Examples: src/gpufleet/examples/plan-*.yaml."""
    try:
        result = plan_from_data(load_yaml(spec), source=str(spec))
    except SpecError as e:
        output.fail(str(e), "see src/gpufleet/examples/plan-*.yaml for the spec's shape", code=2)
    if out is not None:
        _write(result, out)
    if as_json:
        output.emit_json(report.to_dict(result))
        return
    _show(result)


def _write(result: Plan, out: Path) -> None:
    texts = {
        "bom.csv": report.bom_csv(result),
        "cluster.yaml": result.cluster_yaml,
        "topology.conf": result.topology_conf,
        "plan.md": report.markdown(result),
    }
    try:
        out.mkdir(parents=True, exist_ok=True)
        for name in OUTPUT_FILES:
            (out / name).write_text(texts[name], encoding="utf-8")
    except OSError as e:
        output.fail(f"cannot write {out}: {e.strerror}")
    output.note(f"wrote {', '.join(OUTPUT_FILES)} to {out}")


def _show(result: Plan) -> None:
    s = report.summary(result)
    output.fields(
        [
            ("plan", f"{result.spec.name} ({result.spec.workload})"),
            ("nodes", f"{s['nodes']} nodes, {s['gpus']} GPUs"),
            (
                "fabric",
                f"{s['topology']}, {s['tiers']} tier(s): {s['leaves']} leaves, {s['spines']}"
                f" spines, {s['super_spines']} super-spines, {s['bisection_tbps']:g} Tb/s"
                " bisection",
            ),
            (
                "storage",
                f"{s['storage_tb']:g} TB shared, {s['checkpoint_write_gbs']:g} GB/s checkpoint"
                " write",
            ),
            ("facility", f"{s['racks']} racks, {s['total_kw']:,.1f} kW, {s['cooling']} cooling"),
        ]
    )
    output.table(
        ["pool", "nodes", "GPUs", "host GiB", "cores", "NICs", "PCIe lanes", "node kW"],
        [
            [
                n.pool,
                n.count,
                f"{n.gpus}× {n.gpu_model}" if n.gpus else "-",
                f"{n.memory_gib:g} (≥ {n.gpu_memory_gib:g})" if n.gpus else f"{n.memory_gib:g}",
                f"{n.cpu_cores:g} (≥ {n.cores_needed})" if n.gpus else f"{n.cpu_cores:g}",
                f"{n.nics} × {n.nic_gbps}G" if n.nics else "-",
                f"{n.pcie.needed} / {n.pcie.available}",
                f"{n.power.node_w / 1000:.2f}",
            ]
            for n in result.nodes
        ],
        title="Nodes",
        right=("nodes", "node kW"),
    )
    header = report.fabric_header(result)
    output.table(header, report.fabric_rows(result), title="Fabric", right=header[1:])
    output.table(
        ["category", "item", "quantity", "unit", "note"],
        [[b.category, b.item, f"{b.quantity:,g}", b.unit, b.note] for b in result.bom],
        title="Bill of materials",
        right=("quantity",),
    )
    output.table(["figure", "how"], report.worked(result), title="How the figures were worked out")
    output.table(
        ["where", "warning", "what", "why"],
        [[w.where, w.code, w.message, w.reason] for w in result.warnings],
        title="Warnings",
        empty="no warnings",
    )
