"""The validation layers' verdicts on sample inputs: registered inventories, probe results and
metrics as the API and the probes return them, with no cluster behind them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpufleet.api.schemas import EventOut, GpuInfo, JobOut, NodeOut, PlacementOut
from gpufleet.model.cluster import ClusterSpec
from gpufleet.ops.validate import clock, inventory, monitoring, network, storage
from gpufleet.ops.validate import report as rep
from gpufleet.ops.validate.checks import Check, Report, Status
from gpufleet.ops.validate.common import parse_prometheus
from gpufleet.ops.validate.context import Context
from gpufleet.ops.validate.jobs import ProbeRun, RankOutput, whole_node_groups
from gpufleet.ops.validate.runner import parse_layers
from gpufleet.ops.validate.settings import Settings


def gpus(
    n: int, *, skip: tuple[int, ...] = (), gen: int = 5, width: int = 16, links: int = 18
) -> list[GpuInfo]:
    return [
        GpuInfo(
            index=i,
            uuid=f"GPU-{i}",
            model="H100-SXM",
            memory_mib=81920,
            pcie_gen=gen,
            pcie_width=width,
            nvlink_up=links,
        )
        for i in range(n)
        if i not in skip
    ]


def node(name: str, n: int = 8, **kw: Any) -> NodeOut:
    base: dict[str, Any] = {
        "name": name,
        "state": "idle",
        "gpu_model": "H100-SXM",
        "gpus": n,
        "gpus_free": float(n),
        "cpu_cores": 64.0,
        "cpu_free": 64.0,
        "memory_gib": 256.0,
        "memory_free_gib": 256.0,
        "leaf": "leaf-0",
        "pod": "pod-0",
        "driver_version": "550.54.15",
        "cuda_version": "12.4",
        "gpu_info": gpus(n),
        "last_heartbeat": 1000.0,
    }
    base.update(kw)
    return NodeOut.model_validate(base)


def by(checks: list[Check], name: str, target: str | None = None) -> Check:
    return next(c for c in checks if c.name == name and (target is None or c.target == target))


def ctx_for(nodes: list[NodeOut], layers: tuple[str, ...] = ("device",), **kw: Any) -> Context:
    return Context(None, Settings(**kw), layers, nodes=nodes)  # type: ignore[arg-type]


# ----- inventory ---------------------------------------------------------------------------


def test_a_healthy_uniform_cluster_passes_every_inventory_check() -> None:
    nodes = [node("a"), node("b"), node("c")]
    rows = inventory.checks(nodes, None)
    assert {c.status for c in rows} == {Status.PASS}
    assert by(rows, "gpu count", "a").expected == "8 × H100-SXM (3 of 3 H100-SXM nodes)"


def test_a_gpu_missing_from_the_registered_indices_fails_naming_it() -> None:
    rows = inventory.checks([node("a"), node("b", 8, gpu_info=gpus(8, skip=(3,)))], None)
    c = by(rows, "gpu count", "b")
    assert c.status is Status.FAIL and c.detail.startswith("GPU 3 missing")


def test_fewer_gpus_than_the_cluster_spec_fails_and_a_missing_node_too() -> None:
    spec = ClusterSpec.from_dict(
        {
            "nodes": [
                {"name": n, "gpus": 8, "gpu_model": "H100", "cpu_cores": 64, "memory_gib": 256}
                for n in ("a", "b", "c")
            ]
        }
    )
    rows = inventory.checks([node("a"), node("b", 4)], spec)
    c = by(rows, "gpu count", "b")
    assert (
        c.status is Status.FAIL and "(cluster spec)" in c.expected and c.measured == "4 × H100-SXM"
    )
    assert by(rows, "registered", "c").status is Status.FAIL
    assert by(rows, "gpu count", "a").status is Status.PASS


def test_without_a_spec_an_odd_node_is_a_warning_unless_indices_are_missing() -> None:
    rows = inventory.checks([node("a"), node("b"), node("c", 4)], None)
    assert by(rows, "gpu count", "c").status is Status.FAIL  # 4 of the peers' 8
    rows = inventory.checks([node("a", 4), node("b", 4), node("c", 8)], None)
    assert by(rows, "gpu count", "c").status is Status.WARN  # more than the peers


def test_a_mismatched_driver_fails_naming_the_odd_node() -> None:
    rows = inventory.checks([node("a"), node("b"), node("c", driver_version="535.104.05")], None)
    c = by(rows, "driver version")
    assert c.status is Status.FAIL
    assert "535.104.05 on c" in c.measured and c.detail.startswith("c differ(s) from 550.54.15")
    assert by(rows, "cuda version").status is Status.PASS


def test_node_health_states() -> None:
    assert inventory.health(node("a", state="unhealthy", why="GPU 3 missing")).status is Status.FAIL
    assert inventory.health(node("a", state="lost", why="no heartbeat")).status is Status.FAIL
    drained = node("a", state="drained", why="failed its health checks: XID 79")
    assert inventory.health(drained).status is Status.FAIL
    assert inventory.health(node("a", state="drained", why="maintenance")).status is Status.WARN


def test_pcie_and_nvlink_below_expectation_fail() -> None:
    slow = node(
        "a",
        gpu_info=[*gpus(7), *[g.model_copy(update={"index": 7, "pcie_gen": 3}) for g in gpus(1)]],
    )
    c = inventory.pcie(slow)
    assert c.status is Status.FAIL and "GPU 7 gen 3 ×16" in c.detail
    narrow = node("a", gpu_info=gpus(8, width=8))
    assert inventory.pcie(narrow).status is Status.FAIL
    down = node(
        "a",
        gpu_info=[
            *gpus(4),
            *[g.model_copy(update={"index": 4 + i, "nvlink_up": 0}) for i, g in enumerate(gpus(4))],
        ],
    )
    c = inventory.nvlink(down)
    assert c.status is Status.FAIL and "GPU 4: 0 of 18" in c.detail
    assert (
        inventory.expected_nvlinks("B200") == 18 and inventory.expected_nvlinks("A100-80GB") == 12
    )
    assert (
        inventory.expected_nvlinks("L40S") == 0 and inventory.expected_nvlinks("H100-PCIe") is None
    )


# ----- clock -------------------------------------------------------------------------------


def test_skew_fails_only_beyond_threshold_plus_uncertainty() -> None:
    ctx = ctx_for([node("a")], ("clock",), max_skew_ms=50)
    near = clock.skew(ctx, "a", {"clock": {"offset_s": 0.055, "rtt_s": 0.02}}, None)
    assert near.status is Status.PASS  # 55 ms ± 10 ms may be 45 ms
    far = clock.skew(ctx, "a", {"clock": {"offset_s": 5.0, "rtt_s": 0.002}}, None)
    assert far.status is Status.FAIL and far.measured == "+5000.0 ms ± 1.0 ms"


def test_skew_from_job_events_when_the_controller_is_unreachable() -> None:
    job = job_out(
        "1",
        "SUCCEEDED",
        events=[
            EventOut(time=100.0, attempt=1, state="STARTING"),
            EventOut(time=101.0, attempt=1, state="RUNNING"),
            EventOut(time=103.0, attempt=1, state="SUCCEEDED"),
        ],
    )
    ctx = ctx_for([node("a")], ("clock",))
    res = {"clock": {"error": "unreachable"}, "start_time": 110.5, "end_time": 111.0}
    c = clock.skew(ctx, "a", res, job)  # offset ∈ [111 − 103, 110.5 − 100] = [8, 10.5] s
    assert c.status is Status.FAIL and "+8000 … +10500 ms" in c.measured
    ok = {"clock": {"error": "unreachable"}, "start_time": 100.5, "end_time": 101.0}
    assert clock.skew(ctx, "a", ok, job).status is Status.WARN


def test_an_unsynchronised_kernel_clock_is_a_warning() -> None:
    res = {"system": {"time_sync": {"kernel": {"synchronised": False, "maxerror_us": 16_000_000}}}}
    c = clock.sync_check("a", res)
    assert c is not None and c.status is Status.WARN and "16 s" in c.measured


# ----- network -----------------------------------------------------------------------------


def job_out(job_id: str, state: str, **kw: Any) -> JobOut:
    base: dict[str, Any] = {
        "id": job_id,
        "name": "x",
        "user": "u",
        "queue": "default",
        "state": state,
        "attempt": 1,
        "retries_used": 0,
        "submit_time": 0.0,
        "gpus": 16.0,
        "workers": 2,
        "spec": {},
    }
    base.update(kw)
    return JobOut.model_validate(base)


def link(dst: int, gbps: float, rtt: float, dev: str = "eth0") -> dict[str, Any]:
    return {
        "dst": dst,
        "dst_addr": "10.0.0.9",
        "gbps": gbps,
        "rtt_ms": rtt,
        "tool": "builtin",
        "route": {"dev": dev},
    }


def net_run(
    links_a: list[dict[str, Any]], links_b: list[dict[str, Any]], speed: int | None = 100_000
) -> ProbeRun:
    nic = {"name": "eth0", "mtu": 9000, "physical": True, "speed_mbps": speed}
    job = job_out(
        "5",
        "SUCCEEDED",
        placement=[
            PlacementOut(node=n, gpus=[], gpu_milli=0, cpu_milli=0, memory_mib=0) for n in "ab"
        ],
    )
    return ProbeRun(
        "net",
        job,
        [
            RankOutput(0, "a", [], result={"links": links_a, "interfaces": [nic]}),
            RankOutput(1, "b", [], result={"links": links_b, "interfaces": [{**nic, "mtu": 1500}]}),
        ],
    )


def test_links_are_held_to_a_share_of_the_nic_speed() -> None:
    ctx = ctx_for([node("a"), node("b")], ("network",))
    rows = network.link_checks(ctx, net_run([link(1, 85.0, 0.05)], [link(0, 20.0, 5.0)]))
    fast, slow = by(rows, "bandwidth", "a → b"), by(rows, "bandwidth", "b → a")
    assert fast.status is Status.PASS and "80% of 100 Gb/s (eth0)" in fast.expected
    assert slow.status is Status.FAIL and slow.measured == "20.00 Gb/s (builtin)"
    assert by(rows, "latency", "b → a").status is Status.FAIL
    assert by(rows, "mtu").status is Status.WARN


def test_without_a_nic_speed_the_configured_minimum_applies() -> None:
    ctx = ctx_for([node("a"), node("b")], ("network",), min_net_gbps=0.5)
    rows = network.link_checks(
        ctx, net_run([link(1, 0.6, 0.05)], [link(0, 0.05, 0.05)], speed=None)
    )
    assert by(rows, "bandwidth", "a → b").status is Status.PASS
    c = by(rows, "bandwidth", "b → a")
    assert c.status is Status.FAIL and "configured minimum" in c.expected


def test_a_rank_without_a_result_fails_with_the_jobs_fate() -> None:
    run = net_run([], [])
    run.ranks[1].result = None
    run.ranks[1].stderr = "Traceback ...\nConnectionRefusedError: [Errno 111]"
    rows = network.link_checks(ctx_for([node("a"), node("b")]), run)
    c = by(rows, "links", "b")
    assert c.status is Status.FAIL and "ConnectionRefusedError" in c.detail


# ----- storage -----------------------------------------------------------------------------


def test_storage_thresholds_and_the_shared_marker() -> None:
    ctx = ctx_for([node("a")], ("storage",), shared="/mnt/shared", min_write_mbps=500)
    st = {
        "path": "/mnt/shared",
        "fstype": "nfs4",
        "io": {
            "tool": "fio",
            "write_mbps": 120.0,
            "read_mbps": 900.0,
            "rand_read_iops": 5000,
            "small_file_iops": 900,
        },
    }
    rows = storage.io_checks(ctx, "a", st)
    assert by(rows, "write throughput").status is Status.FAIL
    assert by(rows, "read throughput").status is Status.PASS
    import hashlib

    good = {
        "marker": {
            "marker_sha256": hashlib.sha256(ctx.token.encode()).hexdigest(),
            "fstype": "nfs4",
        }
    }
    assert storage.shared_check(ctx, "a", good).status is Status.PASS
    bad = {"marker": {"marker_sha256": "0" * 64, "fstype": "ext4"}}
    assert "not the storage the other nodes share" in storage.shared_check(ctx, "a", bad).detail
    absent = {"marker": {"error": "/mnt/shared does not exist on this node"}}
    assert storage.shared_check(ctx, "a", absent).status is Status.FAIL


# ----- monitoring --------------------------------------------------------------------------

METRICS = """\
# HELP gpufleet_node_heartbeat_age_seconds x
gpufleet_node_heartbeat_age_seconds{Hostname="a"} 0.4
DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-0",Hostname="a",modelName="H100-SXM"} 40
DCGM_FI_DEV_GPU_TEMP{gpu="1",UUID="GPU-1",Hostname="a",modelName="H100-SXM"} 41
DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{gpu="0",Hostname="a"} 2
"""


def test_prometheus_text_is_parsed_with_labels() -> None:
    samples = parse_prometheus(METRICS)
    assert samples[0] == ("gpufleet_node_heartbeat_age_seconds", {"Hostname": "a"}, 0.4)
    assert samples[1][1]["UUID"] == "GPU-0"


def test_an_unparsable_exposition_is_a_warning_that_says_why() -> None:
    nodes = [node("a", 2)]
    ctx = ctx_for(nodes, ("monitoring",))
    ctx._metrics = 'broken{Hostname="a" 1\n'
    (row,) = monitoring.exporter_checks(ctx, nodes)
    assert row.status is Status.WARN and "not Prometheus' text format" in row.detail


def test_metrics_must_cover_every_gpu_of_every_node() -> None:
    nodes = [node("a", 2), node("b", 2)]
    ctx = ctx_for(nodes, ("monitoring",))
    ctx._metrics = METRICS
    rows = monitoring.exporter_checks(ctx, nodes)
    assert by(rows, "/metrics", "a").status is Status.PASS
    assert by(rows, "/metrics", "b").status is Status.FAIL
    from gpufleet.ops.validate import device

    dbe = device.ecc_errors(ctx)
    assert dbe[0].target == "a" and dbe[0].status is Status.FAIL


# ----- plumbing ----------------------------------------------------------------------------


def test_layers_parse_in_canonical_order() -> None:
    assert parse_layers("clock,device") == ["device", "clock"]
    assert parse_layers("all")[0] == "device" and len(parse_layers(None)) == 7
    with pytest.raises(ValueError, match="unknown layer 'gpu'"):
        parse_layers("gpu")


def test_whole_node_groups_put_the_largest_nodes_first() -> None:
    groups = whole_node_groups([node("a", 4), node("b", 8), node("c", 4)])
    assert [(g, [n.name for n in ns]) for g, ns in groups] == [(8, ["b"]), (4, ["a", "c"])]


def test_reports_render_every_check(tmp_path: Path) -> None:
    r = Report("http://c:8600", ["device"], 0.0, 3.0)
    r.add(
        [
            Check("device", "gpu count", "a", Status.PASS, "8", "8"),
            Check(
                "device", "driver version", "cluster", Status.FAIL, "535 | 550", "one", "fix <b>"
            ),
        ]
    )
    assert not r.ok and r.counts == {"PASS": 1, "WARN": 0, "FAIL": 1, "SKIP": 0}
    md = rep.to_markdown(r)
    assert "## device — FAIL" in md and "535 \\| 550" in md and "## Failures" in md
    html = rep.to_html(r)
    assert "fix &lt;b&gt;" in html and "<table>" in html
    rep.write(r, tmp_path / "r.json")
    assert json.loads((tmp_path / "r.json").read_text())["counts"]["FAIL"] == 1
    rep.write(r, tmp_path / "r.html")
    assert (tmp_path / "r.html").read_text().startswith("<!doctype html>")


def test_the_nodes_own_tools_against_what_its_agent_registered() -> None:
    from gpufleet.ops.probes.gpu import parse_smi_csv
    from gpufleet.ops.validate import device

    smi_gpus = parse_smi_csv(
        "0, GPU-0, H100, 81559, 0:18:00.0, 5, 16, 5, 16, Enabled, 550.90.07\n"
        "1, GPU-1, H100, 81559, 0:2A:00.0, 5, 16, 5, 16, Disabled, 550.90.07\n"
    )
    res = {
        "gpu": {
            "driver": {"loaded": True, "version": "550.90.07"},
            "smi": {"present": True, "gpus": smi_gpus},
            "nvml": {"loaded": True, "driver_version": "550.90.07"},
            "dev": [{"path": "/dev/nvidia0", "rw": False}],
        }
    }
    n = node("a", 3)
    rows = device.native_view(n, res)
    seen = by(rows, "gpus seen on the node")
    assert seen.status is Status.FAIL and seen.measured == "2 (nvidia-smi)"
    assert by(rows, "device permissions").status is Status.FAIL
    drv = by(rows, "driver version")  # the node's driver is not the one the agent registered
    assert drv.status is Status.FAIL and "restart the agent" in drv.detail
    ecc = device.ecc(ctx_for([n]), n, res)
    assert ecc is not None and ecc.status is Status.FAIL and "GPU 1" in ecc.detail
    sim = {"gpu": {"driver": {"loaded": False}, "smi": {"present": False}}}
    assert [c.status for c in device.native_view(n, sim)] == [Status.SKIP]
