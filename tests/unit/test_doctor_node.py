"""``doctor node``'s analysers on sample probe results and API rows: GPU not recognized,
device permissions, NVML errors, the clock, storage and slow links."""

from __future__ import annotations

from typing import Any

from gpufleet.api.schemas import GpuInfo, NodeOut
from gpufleet.ops.doctor import node as nd
from gpufleet.ops.doctor.finding import Severity
from gpufleet.ops.validate.jobs import ProbeRun, RankOutput
from gpufleet.ops.validate.settings import Settings

DEV_OK = [
    {"path": "/dev/nvidiactl", "rw": True, "mode": "0o666", "uid": 0, "gid": 0},
    {"path": "/dev/nvidia0", "rw": True, "mode": "0o666", "uid": 0, "gid": 0},
]
DRIVER = {"loaded": True, "version": "550.54.15", "modules": ["nvidia", "nvidia_uvm"]}


def api_node(**kw: Any) -> NodeOut:
    base: dict[str, Any] = {
        "name": "n1",
        "state": "idle",
        "gpu_model": "H100-SXM",
        "gpus": 2,
        "gpus_free": 2.0,
        "cpu_cores": 8.0,
        "cpu_free": 8.0,
        "memory_gib": 64.0,
        "memory_free_gib": 64.0,
        "leaf": "l",
        "pod": "p",
        "last_heartbeat": 100.0,
        "driver_version": "550.54.15",
        "gpu_info": [
            GpuInfo(index=i, uuid=f"GPU-{i}", model="H100-SXM", memory_mib=1) for i in range(2)
        ],
    }
    base.update(kw)
    return NodeOut.model_validate(base)


def codes(findings: list[nd.Finding]) -> dict[str, nd.Finding]:
    return {f.code: f for f in findings}


def test_driver_not_loaded() -> None:
    g = {
        "driver": {"loaded": False, "modules": []},
        "smi": {"present": True, "error": "NVIDIA-SMI has failed"},
        "dev": [],
    }
    (f,) = nd.gpu_findings(g, 8, "n1")
    assert f.code == "driver_not_loaded" and "modprobe nvidia" in f.next_step
    assert "Secure Boot" in f.cause


def test_simulated_gpus_are_information_not_an_error() -> None:
    g = {"driver": {"loaded": False, "modules": []}, "smi": {"present": False}, "dev": []}
    (f,) = nd.gpu_findings(g, 8, "n1")
    assert f.code == "no_driver" and f.severity is Severity.INFO


def test_device_nodes_and_their_permissions() -> None:
    denied = [{**DEV_OK[0]}, {**DEV_OK[1], "rw": False, "mode": "0o600"}]
    g = {
        "driver": DRIVER,
        "dev": denied,
        "nvml": {"loaded": True, "count": 1},
        "smi": {"gpus": [{}]},
    }
    f = codes(nd.gpu_findings(g, 1, "n1"))
    assert "/dev/nvidia0 mode 0o600" in f["device_permissions"].seen
    g = {"driver": DRIVER, "dev": [], "nvml": {}, "smi": {}}
    assert "device_nodes" in codes(nd.gpu_findings(g, 1, "n1"))


def test_nvml_errors_are_explained() -> None:
    g = {
        "driver": DRIVER,
        "dev": DEV_OK,
        "nvml": {"loaded": True, "init_rc": 18, "error": "Driver/library version mismatch"},
        "smi": {},
    }
    f = codes(nd.gpu_findings(g, 1, "n1"))["nvml_error"]
    assert "upgraded without a reboot" in f.cause and "reboot" in f.next_step


def test_fewer_gpus_in_nvidia_smi_than_registered() -> None:
    g = {
        "driver": DRIVER,
        "dev": DEV_OK,
        "nvml": {"loaded": True, "count": 7},
        "smi": {"gpus": [{}] * 7},
    }
    f = codes(nd.gpu_findings(g, 8, "n1"))["gpu_missing"]
    assert "lists 7, the agent registered 8" in f.seen and "dmesg" in f.next_step


def test_clock_skew_and_unsynchronised_time_service() -> None:
    res = {
        "clock": {"offset_s": -2.0, "rtt_s": 0.002},
        "system": {"time_sync": {"kernel": {"synchronised": False}, "ntp_synchronized": False}},
    }
    f = codes(nd.clock_findings(res, 50, "n1"))
    assert f["clock_skew"].seen.startswith("-2000.0 ms") and "chronyc" in f["clock_skew"].next_step
    assert f["time_unsynced"].severity is Severity.WARNING
    fine = {
        "clock": {"offset_s": 0.001, "rtt_s": 0.002},
        "system": {"time_sync": {"kernel": {"synchronised": True}}},
    }
    assert [x.severity for x in nd.clock_findings(fine, 50, "n1")] == [Severity.OK]


def test_storage_bottleneck() -> None:
    st = {
        "path": "/data",
        "fstype": "nfs4",
        "source": "nas:/x",
        "io": {"write_mbps": 40.0, "read_mbps": 900.0, "small_file_iops": 30},
    }
    (f,) = nd.storage_findings(st, Settings(), "n1")
    assert (
        f.code == "storage_slow"
        and "40 MB/s write (< 100)" in f.seen
        and "30 small-file IOPS" in f.seen
    )
    assert "local NVMe" in f.next_step


def test_slow_link_names_mtu_mismatch_and_gateway() -> None:
    a = {
        "links": [
            {
                "dst": 1,
                "gbps": 2.0,
                "rtt_ms": 0.1,
                "route": {
                    "dev": "eth0",
                    "via": "10.0.0.1",
                    "ip_route": "10.1.0.2 via 10.0.0.1 dev eth0",
                },
            }
        ],
        "interfaces": [{"name": "eth0", "mtu": 9000, "physical": True, "speed_mbps": 100_000}],
    }
    b = {
        "links": [],
        "interfaces": [{"name": "eth0", "mtu": 1500, "physical": True, "speed_mbps": 100_000}],
    }
    run = ProbeRun(
        "net", None, [RankOutput(0, "n1", [], result=a), RankOutput(1, "n2", [], result=b)]
    )
    (f,) = nd.network_findings(run, "n1", Settings())
    assert f.code == "slow_link" and f.target == "n1 → n2"
    assert "MTUs differ" in f.cause and "gateway 10.0.0.1" in f.cause
    assert "MTU 9000 here" in f.seen and "1500 at n2" in f.seen


def test_api_findings_for_unhealthy_lost_and_odd_driver_nodes() -> None:
    sick = api_node(state="unhealthy", why="GPU 1 missing (fell off the bus?)")
    f = codes(nd.api_findings(sick, [sick], 101.0, 30))["unhealthy"]
    assert "fell off the PCIe bus" in f.cause and "--local" in f.next_step
    lost = api_node(state="lost", why="no heartbeat for 12 s")
    assert codes(nd.api_findings(lost, [lost], 101.0, 30))["node_lost"].severity is Severity.ERROR
    peers = [api_node(name=f"p{i}") for i in range(3)]
    odd = api_node(driver_version="535.104.05")
    assert "driver_mismatch" in codes(nd.api_findings(odd, [*peers, odd], 101.0, 30))
    late = api_node(last_heartbeat=10.0)
    assert "heartbeat_late" in codes(nd.api_findings(late, [late], 101.0, 30))
