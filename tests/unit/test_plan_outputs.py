"""What the plan hands on: the ClusterSpec (it loads, with the planned nodes and fabric), Slurm's
topology.conf, the BOM, plan.md, JSON, and the ``gpufleet plan`` command."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import yaml
from typer.testing import CliRunner

from gpufleet.cli.main import app
from gpufleet.io.specs import example, load_cluster
from gpufleet.model.cluster import ClusterSpec
from gpufleet.ops.plan import Plan, plan_from_data, report
from gpufleet.ops.plan.slurm import hostlist


def tiny(nodes: int, topology: str, radix: int = 8) -> dict[str, Any]:
    """``nodes`` × 2 H100 with 2 NICs of 400 Gb/s on ``radix``-port switches."""
    return {
        "name": "tiny",
        "workload": {
            "kind": "training",
            "gpus": 2 * nodes,
            "gpu_model": "H100",
            "gpus_per_node": 2,
            "pool": "gpu",
        },
        "model": {"parameters": "1B"},
        "network": {"topology": topology, "switch_radix": radix},
    }


def plan(data: dict[str, Any]) -> Plan:
    return plan_from_data(data, source="t.yaml")


def test_cluster_yaml_loads_with_the_planned_nodes_and_leaves() -> None:
    p = plan_from_data(yaml.safe_load(example("plan-llm-256.yaml").read_text()), source="x")
    loaded = ClusterSpec.from_dict(yaml.safe_load(p.cluster_yaml), source="cluster.yaml")
    assert len(loaded.nodes) == 256 and loaded.total_gpus == 2048
    assert loaded.leaves == tuple((g.name, g.pod) for g in p.fabric.groups)
    for g in p.fabric.groups:  # every planned group holds exactly its nodes
        names = [n.name for n in loaded.nodes if n.leaf == g.name]
        assert names == [f"h100-sxm-{i:03d}" for i in range(g.first_node, g.first_node + g.nodes)]
    node = loaded.nodes[0]
    assert (node.gpu_model, node.cpu_milli, node.memory_mib) == ("H100-SXM", 112_000, 768 * 1024)
    assert node.label_map == {"nic_gbps": "400", "nics": "8"}


def test_three_tier_cluster_yaml_has_one_pod_per_spine_group() -> None:
    p = plan_from_data(yaml.safe_load(example("plan-llm-512.yaml").read_text()), source="x")
    loaded = ClusterSpec.from_dict(yaml.safe_load(p.cluster_yaml), source="cluster.yaml")
    assert len(loaded.nodes) == 512
    assert sorted(set(loaded.leaf_pod.values())) == ["pod-0", "pod-1", "pod-2", "pod-3"]


def test_a_given_cluster_keeps_its_pools_nodes_and_queues(tmp_path: Path) -> None:
    p = plan_from_data(yaml.safe_load(example("plan-lab.yaml").read_text()), source="x")
    out = tmp_path / "cluster.yaml"
    out.write_text(p.cluster_yaml)
    loaded = load_cluster(out)
    assert [q.name for q in loaded.queues] == ["vision", "nlp"]
    assert len(loaded.nodes) == 25 and loaded.total_gpus == 192
    login = next(n for n in loaded.nodes if n.name == "login")
    assert (login.leaf, login.pod) == ("frontend", "frontend")
    assert {n.leaf for n in loaded.nodes if n.pool == "a100"} == {"su-001"}
    assert "SwitchName=frontend Nodes=login\n" in p.topology_conf


def test_topology_conf_of_a_tiny_spine_leaf() -> None:
    # 4 nodes × 2 NICs, 8-port switches at 1:1: 4 down + 4 up per leaf, 2 nodes per leaf,
    # 2 leaves × 4 uplinks = 8 spine ports → 2 spines (one would do, two for redundancy)
    assert plan(tiny(4, "spine-leaf")).topology_conf == (
        "# Slurm topology.conf (TopologyPlugin=topology/tree) for tiny, written by gpufleet plan.\n"
        "# spine-leaf, two tiers: 8 endpoints × 400 Gb/s, 2 leaves, 2 spines, 0 super-spines, 1:1\n"
        "# Each pod-N stands for its spines: every leaf links to every spine of its pod.\n"
        "SwitchName=leaf-000 Nodes=gpu-[000-001]\n"
        "SwitchName=leaf-001 Nodes=gpu-[002-003]\n"
        "SwitchName=pod-0 Switches=leaf-[000-001]\n"
    )


def test_topology_conf_of_a_tiny_three_tier_rail_fabric() -> None:
    # 20 nodes × 2 rails, 8-port switches: groups of 4 nodes on 2 rail leaves → 5 groups,
    # 10 leaves > 8 → pods of ≤ 4 leaves (2 groups); pod spines 4, 4, 2; 40 uplinks / 8 → 5 core
    p = plan(tiny(20, "rail-optimized"))
    assert (p.fabric.spines_per_pod, p.fabric.super_spines) == ((4, 4, 2), 5)
    assert p.topology_conf == (
        "# Slurm topology.conf (TopologyPlugin=topology/tree) for tiny, written by gpufleet plan.\n"
        "# rail-optimized, three tiers: 40 endpoints × 400 Gb/s, 10 leaves, 10 spines,"
        " 5 super-spines, 1:1\n"
        "# Each su-NNN stands for its 2 rail leaves (NIC i of every node in it goes to rail i's"
        " leaf).\n"
        "# Each pod-N stands for its spines: every leaf links to every spine of its pod.\n"
        "# core stands for the 5 super-spines.\n"
        "SwitchName=su-000 Nodes=gpu-[000-003]\n"
        "SwitchName=su-001 Nodes=gpu-[004-007]\n"
        "SwitchName=su-002 Nodes=gpu-[008-011]\n"
        "SwitchName=su-003 Nodes=gpu-[012-015]\n"
        "SwitchName=su-004 Nodes=gpu-[016-019]\n"
        "SwitchName=pod-0 Switches=su-[000-001]\n"
        "SwitchName=pod-1 Switches=su-[002-003]\n"
        "SwitchName=pod-2 Switches=su-004\n"
        "SwitchName=core Switches=pod-[0-2]\n"
    )


def test_hostlist_compresses_runs_as_slurm_writes_them() -> None:
    names = ["a-000", "a-001", "a-002", "a-005", "b-1", "login", "x9", "x10"]
    # zero-padded numbers keep their width; plain ones join whatever their length (Slurm)
    assert hostlist(names) == "a-[000-002,005],b-1,login,x[9-10]"
    assert hostlist(["gpu-007"]) == "gpu-007"


def test_bom_csv_and_plan_md() -> None:
    p = plan_from_data(yaml.safe_load(example("plan-llm-256.yaml").read_text()), source="x")
    rows = list(csv.DictReader(io.StringIO(report.bom_csv(p))))
    by_item = {r["item"]: r for r in rows}
    assert by_item["H100-SXM"]["quantity"] == "2048"
    assert by_item["leaf 64 × 400 Gb/s switch"]["quantity"] == "64"
    assert by_item["spine 64 × 400 Gb/s switch"]["quantity"] == "32"
    assert by_item["400 Gb/s transceiver"]["quantity"] == "8192"
    md = report.markdown(p)
    for heading in ("# Plan: llm-256", "## Warnings", "## Fabric", "## Bill of materials"):
        assert heading in md
    assert "| fabric: bisection | 2048 × 400 Gb/s / 2 = 409.6 Tb/s" in md


def test_cli_json_and_out_dir(tmp_path: Path) -> None:
    spec = str(example("plan-llm-256.yaml"))
    result = CliRunner().invoke(app, ["plan", spec, "--json", "--out", str(tmp_path / "o")])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    s = doc["summary"]
    assert (s["nodes"], s["gpus"], s["leaves"], s["spines"], s["optics"]) == (
        256,
        2048,
        64,
        32,
        8192,
    )
    assert s["bisection_tbps"] == 409.6 and doc["fabric"]["max_hops"] == 3
    assert [w["code"] for w in doc["warnings"]] == ["liquid-cooling"]
    written = sorted(p.name for p in (tmp_path / "o").iterdir())
    assert written == ["bom.csv", "cluster.yaml", "plan.md", "topology.conf"]
    assert len(load_cluster(tmp_path / "o" / "cluster.yaml").nodes) == 256


def test_cli_tables() -> None:
    result = CliRunner().invoke(app, ["plan", str(example("plan-llm-512.yaml"))])
    assert result.exit_code == 0, result.output
    for words in ("Nodes", "Fabric", "Bill of materials", "three-tier", "super-spine"):
        assert words in result.stdout


def test_cli_refuses_a_bad_spec_with_file_and_field(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("workload: {gpus: 8, gpu_model: H100}\nnetwork: {switch_radix: many}\n")
    result = CliRunner().invoke(app, ["plan", str(bad)])
    assert result.exit_code == 2
    assert f"{bad}: network.switch_radix: must be an integer" in result.stderr
    missing = CliRunner().invoke(app, ["plan", str(tmp_path / "none.yaml")])
    assert missing.exit_code == 2 and "no such file" in missing.stderr


def test_explicit_gpu_nodes_of_one_shape_share_a_group() -> None:
    node = {"gpu_model": "A100", "gpus": 8, "cpu_cores": 96, "memory_gib": 1024}
    data = {
        "name": "odd",
        "pools": [{"name": "h100", "count": 3, "gpu_model": "H100", "gpus": 8,
                   "cpu_cores": 112, "memory_gib": 1024}],
        "nodes": [{"name": f"box{i}", **node} for i in range(3)],
    }  # fmt: skip
    p = plan(data)
    assert [n.pool for n in p.nodes] == ["h100", "nodes-a100-80gb"]
    assert [(g.pool, g.nodes) for g in p.fabric.groups] == [("h100", 3), ("nodes-a100-80gb", 3)]
    loaded = ClusterSpec.from_dict(yaml.safe_load(p.cluster_yaml))
    assert loaded.name == "odd"
    assert {n.leaf for n in loaded.nodes if n.name.startswith("box")} == {"su-001"}
    assert "SwitchName=su-001 Nodes=box[0-2]\n" in p.topology_conf


def test_no_alternative_where_the_other_topology_does_not_fit() -> None:
    # 8-port leaves at 3:1 give 6 down: a node's 6 NICs fill one leaf (spine-leaf, 7 leaves), but
    # 7 nodes need 2 rail groups of 6 leaves = 12 > 8, and a pod holds only 8/2 = 4 leaves
    data = tiny(7, "spine-leaf")
    data["workload"].update(gpus=6 * 7, gpus_per_node=6)
    data["network"]["oversubscription"] = 3
    p = plan(data)
    assert (p.fabric.tiers, p.fabric.leaves, p.alternative) == (2, 7, None)
    assert report.fabric_header(p) == ["", "spine-leaf (planned)"]
    assert "## Fabric" in report.markdown(p) and report.to_dict(p)["alternative_fabric"] is None
