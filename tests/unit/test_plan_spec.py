"""The plan spec is validated like every gpufleet spec: a refusal names the file and the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpufleet.io.specs import EXAMPLES, load_yaml
from gpufleet.model.errors import SpecError
from gpufleet.ops.plan import plan_from_data, read_plan_spec
from gpufleet.ops.plan.fabric import ratio_text

SRC = "plan.yaml"


def good() -> dict[str, Any]:
    return {
        "name": "t",
        "workload": {"kind": "training", "gpus": 64, "gpu_model": "H100", "gpus_per_node": 8},
        "model": {"parameters": "70B"},
        "storage": {"dataset_tb": 10},
        "node": {"nic_gbps": 400},
        "network": {"switch_radix": 64, "oversubscription": 1},
        "power": {"rack_kw": 40},
    }


def cluster() -> dict[str, Any]:
    return {
        "name": "lab",
        "pools": [
            {"name": "h100", "count": 4, "gpu_model": "H100", "gpus": 8, "cpu_cores": 112,
             "memory_gib": 1024, "leaves": ["old-leaf"]},
        ],
        "fabric": [{"pod": "old", "leaves": ["old-leaf"]}],
        "nodes": [{"name": "login", "gpus": 0, "cpu_cores": 16, "memory_gib": 64}],
        "queues": [{"name": "vision", "quota": {"gpus": 16}}],
    }  # fmt: skip


def refused(data: Any) -> SpecError:
    with pytest.raises(SpecError) as info:
        read_plan_spec(data, source=SRC)
    assert info.value.source == SRC
    return info.value


def edit(path: str, value: Any, data: dict[str, Any] | None = None) -> dict[str, Any]:
    data = data or good()
    *parents, last = path.split(".")
    node = data
    for p in parents:
        node = node[p]
    node[last] = value
    return data


@pytest.mark.parametrize(
    ("path", "value", "field", "words"),
    [
        ("typo", 1, "typo", "unknown key"),
        ("network.radix", 64, "network.radix", "unknown key"),
        ("workload.kind", "serving", "workload.kind", "training, inference"),
        ("workload.gpus", 0, "workload.gpus", "at least 1"),
        ("workload.gpu_model", "H1000", "workload.gpu_model", "unknown GPU model"),
        ("model.parameters", "70X", "model.parameters", "such as 70e9"),
        ("model.parameters", -5, "model.parameters", "above 0"),
        ("model.optimizer", "lion", "model.optimizer", "adam"),
        ("storage.checkpoint_write_share", 0, "storage.checkpoint_write_share", "above 0"),
        ("storage.checkpoints_kept", 0, "storage.checkpoints_kept", "at least 1"),
        ("node.platform", "xeon", "node.platform", "sapphire-rapids, genoa"),
        ("node.nic_gbps", "fast", "node.nic_gbps", "integer"),
        ("node.pcie_switches", "yes", "node.pcie_switches", "true or false"),
        ("network.topology", "torus", "network.topology", "rail-optimized, spine-leaf"),
        ("network.oversubscription", 0.5, "network.oversubscription", "at least 1"),
        ("network.oversubscription", "3:0", "network.oversubscription", "ratio"),
        ("network.switch_radix", 2, "network.switch_radix", "at least 4"),
        ("power.rack_kw", 0, "power.rack_kw", "above 0"),
        ("power.overhead_factor", 0.5, "power.overhead_factor", "at least 1"),
    ],
)
def test_bad_values_are_refused_with_their_field(
    path: str, value: Any, field: str, words: str
) -> None:
    e = refused(edit(path, value))
    assert e.field == field and words in e.reason
    assert str(e).startswith(f"{SRC}: {field}: ")


def test_a_section_must_be_a_mapping() -> None:
    assert refused(edit("network", [64])).field == "network"


def test_workload_or_cluster_is_required() -> None:
    data = good()
    del data["workload"]
    assert "workload" in refused(data).reason


def test_counts_read_as_people_write_them() -> None:
    for given in (70_000_000_000, 7e10, "70e9", "70B", "70 b", "0.07T"):
        spec = read_plan_spec(edit("model.parameters", given), source=SRC)
        assert spec.model.parameters == pytest.approx(70e9)


def test_oversubscription_reads_ratios() -> None:
    for given, text in ((1, "1:1"), (3, "3:1"), ("3:1", "3:1"), (1.5, "3:2"), ("2", "2:1")):
        spec = read_plan_spec(edit("network.oversubscription", given), source=SRC)
        assert ratio_text(spec.network.oversubscription) == text


def test_cluster_errors_name_the_field_under_cluster() -> None:
    bad = cluster()
    bad["pools"][0]["gpus"] = "eight"
    e = refused({"workload": {"kind": "training"}, "cluster": bad})
    assert e.field == "cluster.pools[0].gpus"
    e = refused(bad)  # a plain cluster spec: the fields are its own
    assert e.field == "pools[0].gpus"


def test_a_cluster_brings_its_own_gpus_and_hosts() -> None:
    e = refused({"workload": {"kind": "training", "gpus": 8}, "cluster": cluster()})
    assert e.field == "workload.gpus" and "cluster's pools" in e.reason
    e = refused({"cluster": cluster(), "node": {"memory_gib": 2048}})
    assert e.field == "node.memory_gib"


def test_a_plain_cluster_spec_plans_with_defaults() -> None:
    spec = read_plan_spec(cluster(), source=SRC)
    assert spec.from_cluster and spec.name == "lab" and spec.workload == "training"
    assert [(g.name, g.count, g.gpus) for g in spec.groups] == [("h100", 4, 8), ("nodes-cpu", 1, 0)]


def test_impossible_fabrics_are_refused() -> None:
    # 16 NICs per node cannot share one leaf of 8 downlinks (radix 16 at 1:1)
    data = edit("network", {"switch_radix": 16, "topology": "spine-leaf"})
    data["node"]["nics"] = 16
    with pytest.raises(SpecError) as info:
        plan_from_data(data, source=SRC)
    assert info.value.field == "network.switch_radix"
    # a rail group of 8 leaves cannot sit in a pod of 8/2 = 4 leaves
    data = edit("network", {"switch_radix": 8})
    data["workload"]["gpus"] = 8 * 40
    with pytest.raises(SpecError) as info:
        plan_from_data(data, source=SRC)
    assert info.value.field == "network.switch_radix" and "pod of 4 leaves" in info.value.reason
    # beyond three tiers of 8-port switches: 2 nodes per leaf, 4 leaves per pod, 8 pods = 64 nodes
    data = edit("network", {"switch_radix": 8, "topology": "spine-leaf"})
    data["workload"].update(gpus=65 * 2, gpus_per_node=2)
    with pytest.raises(SpecError) as info:
        plan_from_data(data, source=SRC)
    assert info.value.field == "network.switch_radix" and "fourth tier" in info.value.reason
    data["workload"]["gpus"] = 64 * 2
    assert plan_from_data(data, source=SRC).fabric.pods[-1] == "pod-7"


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("plan-*.yaml")), ids=lambda p: p.name)
def test_examples_plan(path: Path) -> None:
    p = plan_from_data(load_yaml(path), source=str(path))
    assert p.gpus > 0 and p.bom
