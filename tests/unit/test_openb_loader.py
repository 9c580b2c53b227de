"""openb trace loaders: malformed input is refused with file, line and column; real files load."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.model.errors import SpecError
from gpufleet.scheduler.openb_scores import PodRequest
from gpufleet.sim.openb import load_cluster, load_nodes, load_pods

TRACES = Path(__file__).resolve().parents[2].parent / "shared" / "traces" / "alibaba-openb"
needs_traces = pytest.mark.skipif(not TRACES.exists(), reason=f"openb traces not found at {TRACES}")

NODE_HEAD = "sn,cpu_milli,memory_mib,gpu,model\n"
POD_HEAD = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"


def write(tmp_path: Path, text: str, name: str = "t.csv") -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def test_node_rows_become_node_specs(tmp_path: Path) -> None:
    p = write(tmp_path, NODE_HEAD + "n-0,96000,393216,8,G2\nn-1,32000,262144,0,\n")
    nodes = load_nodes(p)
    assert [(n.name, n.gpu_model, n.gpus, n.cpu_milli, n.memory_mib) for n in nodes] == [
        ("n-0", "G2", 8, 96000, 393216),
        ("n-1", "", 0, 32000, 262144),
    ]
    assert {(n.leaf, n.pod) for n in nodes} == {("leaf-0", "pod-0")}
    cluster = load_cluster(p)
    assert cluster.name == "t" and cluster.total_gpus == 8
    assert cluster.leaves == (("leaf-0", "pod-0"),)


def test_pod_rows_follow_the_conversion_rules(tmp_path: Path) -> None:
    p = write(
        tmp_path,
        POD_HEAD + "p-0,12000,16384,1,1000,\n"
        "p-1,6000,12288,1,460,V100M16|V100M32\n"
        "p-2,4000,8192,0,500,T4\n"  # CPU-only: GPU columns ignored
        "p-3,4000,8192,1,1500,\n",  # clipped to 1000
    )
    assert load_pods(p) == [
        PodRequest(12000, 16384, 1, 1000, (), "p-0"),
        PodRequest(6000, 12288, 1, 460, ("V100M16", "V100M32"), "p-1"),
        PodRequest(4000, 8192, 0, 0, (), "p-2"),
        PodRequest(4000, 8192, 1, 1000, (), "p-3"),
    ]


@pytest.mark.parametrize(
    ("row", "column", "words"),
    [
        ("n-1,lots,262144,2,P100", "cpu_milli", "integer"),
        ("n-1,64000,-5,2,P100", "memory_mib", "at least 0"),
        ("n-1,64000,262144,,P100", "gpu", "empty"),
        ("n-1,64000,262144,2,", "model", "empty"),
        ("n-0,64000,262144,2,P100", "sn", "already on line 2"),
    ],
)
def test_malformed_node_row_names_file_line_and_column(
    tmp_path: Path, row: str, column: str, words: str
) -> None:
    p = write(tmp_path, NODE_HEAD + "n-0,64000,262144,2,P100\n" + row + "\n")
    with pytest.raises(SpecError) as err:
        load_nodes(p)
    assert err.value.source == str(p)
    assert err.value.field == f"line 3: {column}"
    assert words in err.value.reason
    assert str(p) in str(err.value) and "line 3" in str(err.value)


@pytest.mark.parametrize(
    ("row", "column", "words"),
    [
        ("p-1,6000,12288,1.5,460,", "num_gpu", "integer"),
        ("p-1,6000,12288,1,0,", "gpu_milli", "positive"),
        ("p-1,6000,12288,2,500,", "gpu_milli", "whole GPUs"),
        ("p-1,6000,12288,1,500,T4||P100", "gpu_spec", "empty model"),
    ],
)
def test_malformed_pod_row_names_file_line_and_column(
    tmp_path: Path, row: str, column: str, words: str
) -> None:
    p = write(tmp_path, POD_HEAD + "p-0,12000,16384,1,1000,\n" + row + "\n")
    with pytest.raises(SpecError) as err:
        load_pods(p)
    assert (err.value.source, err.value.field) == (str(p), f"line 3: {column}")
    assert words in err.value.reason


def test_short_row_and_bad_headers(tmp_path: Path) -> None:
    p = write(tmp_path, NODE_HEAD + "n-0,64000,262144,2\n")
    with pytest.raises(SpecError, match="expected 5 fields, got 4") as err:
        load_nodes(p)
    assert err.value.field == "line 2"
    p = write(tmp_path, "sn,cpu_milli,memory_mib,gpus,model\n")
    with pytest.raises(SpecError, match="unknown column") as err:
        load_nodes(p)
    assert err.value.field == "line 1" and "'gpus'" in err.value.reason
    p = write(tmp_path, "name,cpu_milli,num_gpu,gpu_milli\n")
    with pytest.raises(SpecError, match=r"missing column.*memory_mib"):
        load_pods(p)
    with pytest.raises(SpecError, match="empty"):
        load_pods(write(tmp_path, ""))
    with pytest.raises(SpecError, match="cannot read"):
        load_pods(tmp_path / "absent.csv")


@needs_traces
def test_real_node_list() -> None:
    nodes = load_nodes(TRACES / "openb_node_list_gpu_node.csv")
    assert len(nodes) == 1213
    assert sum(n.gpus for n in nodes) == 6212
    assert sum(n.cpu_milli for n in nodes) == 107_018_000
    assert {n.gpu_model for n in nodes} == {"G2", "T4", "P100", "V100M16", "V100M32", "G3", "A10"}
    assert len(load_nodes(TRACES / "openb_node_list_all_node.csv")) == 1523


@needs_traces
def test_real_pod_lists() -> None:
    pods = load_pods(TRACES / "openb_pod_list_default.csv")
    assert len(pods) == 8152
    assert sum(p.gpu_demand for p in pods) == 6_086_800
    spec = load_pods(TRACES / "openb_pod_list_gpuspec20.csv")
    assert len(spec) == 8152 and any(p.gpu_models for p in spec)
    multi = load_pods(TRACES / "openb_pod_list_multigpu20.csv")  # fewer columns
    assert len(multi) == 8324 and not any(p.gpu_models for p in multi)
