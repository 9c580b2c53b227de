"""ClusterSpec.from_dict and QueueSpec: the YAML shape of cluster.py's docstring, and every
refusal naming the source, the field path and what is wrong."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gpufleet.model import UNLIMITED, ClusterSpec, SpecError
from gpufleet.model.resources import Resources

SRC = "lab.yaml"


def good() -> dict[str, Any]:
    return {
        "name": "lab",
        "fabric": [
            {"pod": "pod-a", "leaves": ["leaf-1", "leaf-2"]},
            {"pod": "pod-b", "leaves": ["leaf-3"]},
        ],
        "pools": [
            {
                "name": "h100",
                "count": 4,
                "gpu_model": "H100-SXM",
                "gpus": 8,
                "cpu_cores": 112,
                "memory_gib": 2048,
                "nvlink_domain": 8,
                "labels": {"zone": "a"},
                "leaves": ["leaf-1", "leaf-2"],
            },
            {
                "name": "l40s",
                "count": 2,
                "gpu_model": "l40s",  # case-insensitive alias of the catalog name
                "gpus": 4,
                "cpu_cores": 64,
                "memory_gib": 512,
                "leaves": ["leaf-3"],
            },
        ],
        "nodes": [
            {"name": "login", "gpus": 0, "cpu_cores": 32, "memory_gib": 128, "leaf": "leaf-3"}
        ],
        "queues": [
            {
                "name": "vision",
                "cohort": "research",
                "weight": 2,
                "quota": {"gpus": 64, "cpu_cores": 900, "memory_gib": 16000},
            },
            {"name": "nlp", "cohort": "research", "can_lend": False},
        ],
    }


def refused(data: Any) -> SpecError:
    with pytest.raises(SpecError) as e:
        ClusterSpec.from_dict(data, source=SRC)
    err = e.value
    assert err.source == SRC
    assert str(err).startswith(SRC + ": ")
    assert err.reason and err.reason in str(err)
    return err


def with_(path: str, value: Any) -> dict[str, Any]:
    """``good()`` with one field set, e.g. ``with_("pools.0.count", -1)``."""
    data = copy.deepcopy(good())
    *parents, last = path.split(".")
    cur: Any = data
    for p in parents:
        cur = cur[int(p)] if p.isdigit() else cur[p]
    cur[int(last) if last.isdigit() else last] = value
    return data


# ----- what a good spec gives ----------------------------------------------------------------


def test_a_good_spec_reads_pools_fabric_nodes_and_queues() -> None:
    c = ClusterSpec.from_dict(good(), source=SRC)
    assert c.name == "lab" and c.source == SRC
    assert c.leaves == (("leaf-1", "pod-a"), ("leaf-2", "pod-a"), ("leaf-3", "pod-b"))
    names = [n.name for n in c.nodes]
    assert names == [f"h100-00{i}" for i in range(4)] + ["l40s-000", "l40s-001", "login"]
    assert c.total_gpus == 4 * 8 + 2 * 4
    h = c.nodes[0]
    assert (h.gpu_model, h.gpus, h.cpu_milli, h.memory_mib) == ("H100-SXM", 8, 112_000, 2 << 20)
    assert h.nvlink_domain == 8 and h.label_map == {"zone": "a"} and h.pool == "h100"
    # spread evenly over the pool's leaves, in order
    assert [n.leaf for n in c.nodes[:4]] == ["leaf-1", "leaf-1", "leaf-2", "leaf-2"]
    assert c.nodes[4].gpu_model == "L40S" and c.nodes[4].pod == "pod-b"
    assert c.nodes[-1].gpus == 0 and c.nodes[-1].gpu_model == ""
    vision = c.queue("vision")
    assert vision is not None and vision.limited and vision.weight == 2
    assert vision.quota == Resources(64_000, 900_000, 16_000 * 1024)
    nlp = c.queue("nlp")
    assert nlp is not None and nlp.quota == UNLIMITED and not nlp.limited
    assert nlp.can_borrow and not nlp.can_lend
    assert c.queue("nope") is None


def test_without_a_fabric_every_node_sits_in_one_default_leaf() -> None:
    pool = {"name": "a", "count": 3, "gpus": 8, "gpu_model": "A100-80GB", "cpu_cores": 64}
    pool["memory_gib"] = 1024
    c = ClusterSpec.from_dict({"pools": [pool]})
    assert {(n.leaf, n.pod) for n in c.nodes} == {("leaf-0", "pod-0")}
    assert c.name == "cluster" and c.source == "<cluster>"
    del pool["cpu_cores"]
    err = refused({"pools": [pool]})
    assert err.field == "pools[0].cpu_cores" and err.reason == "is required"


# ----- refusals ------------------------------------------------------------------------------


def test_unknown_gpu_model() -> None:
    err = refused(with_("pools.0.gpu_model", "H999"))
    assert err.field == "pools[0].gpu_model"
    assert "unknown GPU model 'H999'" in err.reason and "H100-SXM" in err.reason


def test_a_gpu_pool_without_a_model() -> None:
    data = good()
    del data["pools"][1]["gpu_model"]
    err = refused(data)
    assert err.field == "pools[1].gpu_model" and err.reason == "is required"


@pytest.mark.parametrize(
    ("path", "field"),
    [
        ("pools.0.count", "pools[0].count"),
        ("pools.0.gpus", "pools[0].gpus"),
        ("pools.0.cpu_cores", "pools[0].cpu_cores"),
        ("pools.1.memory_gib", "pools[1].memory_gib"),
        ("nodes.0.cpu_cores", "nodes[0].cpu_cores"),
        ("queues.0.quota.gpus", "queues[0].quota.gpus"),
    ],
)
def test_a_negative_count(path: str, field: str) -> None:
    err = refused(with_(path, -1))
    assert err.field == field
    assert err.reason == "must be at least 0, got -1"


def test_not_a_number() -> None:
    err = refused(with_("pools.0.count", "four"))
    assert err.field == "pools[0].count" and "must be an integer" in err.reason
    err = refused(with_("pools.0.count", True))
    assert "must be an integer" in err.reason


def test_a_node_in_no_leaf() -> None:
    """The fabric has several leaves and the pool names none of them."""
    data = good()
    del data["pools"][0]["leaves"]
    err = refused(data)
    assert err.field == "pools[0].leaves"
    assert err.reason == "the node is in no leaf: name one of leaf-1, leaf-2, leaf-3"
    data = good()
    del data["nodes"][0]["leaf"]
    assert refused(data).field == "nodes[0].leaves"


def test_a_leaf_that_is_not_in_the_fabric() -> None:
    err = refused(with_("pools.1.leaves", ["leaf-9"]))
    assert err.field == "pools[1].leaves"
    assert "leaf 'leaf-9' is not in the fabric" in err.reason


def test_a_pod_without_leaves() -> None:
    err = refused(with_("fabric.1.leaves", []))
    assert err.field == "fabric[1].leaves" and "at least one leaf" in err.reason


def test_duplicate_node_names() -> None:
    data = good()
    data["pools"][1]["prefix"] = "h100"
    data["pools"][1]["count"] = 1
    err = refused(data)
    assert err.field == "pools"
    assert err.reason == "duplicate node name 'h100-000'"


def test_duplicate_leaf_and_queue_names() -> None:
    err = refused(with_("fabric.1.leaves", ["leaf-2"]))
    assert err.field == "fabric" and err.reason == "duplicate leaf name 'leaf-2'"
    err = refused(with_("queues.1.name", "vision"))
    assert err.field == "queues" and err.reason == "duplicate queue name 'vision'"


@pytest.mark.parametrize(
    ("path", "field"),
    [
        ("colour", "colour"),
        ("pools.0.gpu", "pools[0].gpu"),
        ("fabric.0.spine", "fabric[0].spine"),
        ("nodes.0.zone", "nodes[0].zone"),
        ("queues.1.quota", None),  # a quota with an unknown key, below
    ],
)
def test_unknown_keys(path: str, field: str | None) -> None:
    if field is None:
        err = refused(with_(path, {"gpu": 8}))
        field = "queues[1].quota.gpu"
    else:
        err = refused(with_(path, 1))
    assert err.field == field
    assert err.reason.startswith(("unknown key (allowed: ", "unknown key (did you mean '"))


def test_a_spec_that_is_not_a_mapping_or_has_no_nodes() -> None:
    err = refused(["pools"])
    assert err.field == "" and err.reason == "expected a mapping, got list"
    err = refused({"name": "empty"})
    assert err.reason == "the cluster has no nodes (give pools or nodes)"
    err = refused(with_("pools", {"name": "h100"}))
    assert err.field == "pools" and err.reason == "must be a list, got dict"


def test_a_queue_weight_must_be_positive() -> None:
    err = refused(with_("queues.0.weight", 0))
    assert err.field == "queues[0].weight" and err.reason == "must be greater than 0"


def test_the_error_is_a_value_error_and_can_be_relocated() -> None:
    err = refused(with_("pools.0.count", -1))
    assert isinstance(err, ValueError)
    moved = SpecError("bad", field="x").at("other.yaml")
    assert moved.source == "other.yaml" and str(moved) == "other.yaml: x: bad"
    assert err.at("other.yaml").source == SRC  # kept when already located


def test_node_features_and_the_sites_gpu_type_names() -> None:
    CS = ClusterSpec
    spec = CS.from_dict(
        {
            "pools": [
                {"name": "a", "count": 1, "gpu_model": "A100-40GB", "gpus": 4, "cpu_cores": 8,
                 "memory_gib": 64, "features": ["ib", "gmem40"]},
                {"name": "b", "count": 1, "gpu_model": "L40S", "gpus": 4, "cpu_cores": 8,
                 "memory_gib": 64, "gres_type": "GMEM48"},
            ],
            "nodes": [{"name": "cpu1", "cpu_cores": 8, "memory_gib": 64}],
        }
    )  # fmt: skip
    a, b, cpu = spec.nodes
    assert a.features == ("ib", "gmem40") and a.gpu_type == "a100"  # Slurm's usual name
    assert b.gres_type == "gmem48" and b.gpu_type == "gmem48"  # the site's own name wins
    assert cpu.gpu_type == "" and cpu.features == ()
    with pytest.raises(SpecError, match="features"):
        CS.from_dict({"nodes": [{"name": "x", "cpu_cores": 1, "memory_gib": 1,
                                 "features": ["a b"]}]})  # fmt: skip
    with pytest.raises(SpecError, match="no GPU type"):
        CS.from_dict({"nodes": [{"name": "x", "cpu_cores": 1, "memory_gib": 1,
                                 "gres_type": "a100"}]})  # fmt: skip
