"""The probe programs: their parsers on sample tool output, the bundle run as a real
``python -c`` program, the network probe between real local processes, the clock probe against
a real HTTP server (with the documented time-offset testing hook), the storage marker."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from gpufleet.ops.localcluster import free_port
from gpufleet.ops.probes import bundle, clock, common, gpu, net, storage
from gpufleet.ops.probes.nccl import bus_bandwidth

SMI_CSV = """\
0, GPU-aaaa, NVIDIA H100 80GB HBM3, 81559, 00000000:18:00.0, 5, 16, 5, 16, Enabled, 550.54.15
1, GPU-bbbb, NVIDIA H100 80GB HBM3, 81559, 00000000:2A:00.0, 4, 8, 1, 8, Disabled, 550.54.15
2, GPU-cccc, NVIDIA H100 80GB HBM3, [N/A], 00000000:3A:00.0, [N/A], 16, 5, 16, [N/A], 550.54.15
"""

NVLINK = """\
GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-aaaa)
\t Link 0: 26.562 GB/s
\t Link 1: 26.562 GB/s
GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-bbbb)
\t Link 0: <inactive>
\t Link 1: 26.562 GB/s
"""


def test_nvidia_smi_csv_is_read_field_by_field() -> None:
    gpus = gpu.parse_smi_csv(SMI_CSV)
    assert [g["uuid"] for g in gpus] == ["GPU-aaaa", "GPU-bbbb", "GPU-cccc"]
    assert gpus[1]["pcie.link.gen.max"] == 4 and gpus[1]["pcie.link.width.max"] == 8
    assert gpus[1]["ecc.mode.current"] == "Disabled"
    assert gpus[2]["memory.total"] is None and gpus[2]["pcie.link.gen.max"] is None


def test_nvlink_status_counts_active_and_inactive_links() -> None:
    assert gpu.parse_nvlink_status(NVLINK) == {
        0: {"active": 2, "inactive": 0},
        1: {"active": 1, "inactive": 1},
    }


def test_dcgm_diag_json_names_the_failed_tests() -> None:
    doc = {
        "DCGM GPU Diagnostic": {
            "test_categories": [
                {
                    "category": "Deployment",
                    "tests": [
                        {"name": "Denylist", "results": [{"status": "Pass"}]},
                        {
                            "name": "PCIe",
                            "results": [{"status": "Fail", "info": "GPU 1 PCIe replays"}],
                        },
                        {"name": "NVLink", "results": [{"status": "Skip"}]},
                    ],
                }
            ]
        }
    }
    res = gpu.parse_dcgm(json.dumps(doc))
    assert res["passed"] == 1 and res["skipped"] == 1
    assert res["failed"] == ["PCIe: GPU 1 PCIe replays"]
    assert "error" in gpu.parse_dcgm("Error: unable to connect to host engine")


def test_iperf3_and_fio_json() -> None:
    iperf = {
        "end": {
            "sum_received": {"bits_per_second": 9.41e9},
            "streams": [{"sender": {"mean_rtt": 120}}],
        }
    }
    assert net.parse_iperf3(json.dumps(iperf)) == {"gbps": 9.41, "iperf3_rtt_ms": 0.12}
    assert net.parse_iperf3(json.dumps({"error": "unable to connect"})) == {
        "error": "unable to connect"
    }
    fio = {
        "jobs": [
            {"jobname": "seqwrite", "write": {"bw_bytes": 1.5e9}},
            {"jobname": "randread", "read": {"iops": 120000.4}},
        ]
    }
    assert storage.parse_fio("fio-3.35\n" + json.dumps(fio)) == {
        "write_mbps": 1500.0,
        "rand_read_iops": 120000,
    }


def test_nccl_bus_bandwidth_is_nccl_tests_formula() -> None:
    # 1 GB in 0.1 s over 8 ranks: 10 GB/s algorithm bandwidth × 2·7/8
    assert bus_bandwidth(10**9, 0.1, 8) == pytest.approx(17.5)
    assert bus_bandwidth(10**9, 0.0, 8) == 0.0


def test_result_line_round_trips_and_ignores_other_lines() -> None:
    assert common.parse_line('GPUFLEET-PROBE {"a": 1}') == {"a": 1}
    assert common.parse_line("GPUFLEET-PROBE [1]") is None
    assert common.parse_line("hello") is None
    assert common.split_devices("0, 2,") == ["0", "2"] and common.split_devices("") == []


def test_run_never_raises() -> None:
    r = common.run(["/nonexistent/tool"])
    assert r["rc"] is None and "not found" in r["error"]
    r = common.run([sys.executable, "-c", "import time; time.sleep(5)"], timeout=0.2)
    assert r["rc"] is None and "no answer" in r["error"]


# ----- the bundle, run for real ------------------------------------------------------------


def _run(cmd: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> dict:
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env, cwd=cwd)
    assert p.returncode == 0, p.stderr
    lines = [common.parse_line(x) for x in p.stdout.splitlines()]
    results = [x for x in lines if x is not None]
    assert len(results) == 1, p.stdout
    return results[0]


def test_bundle_runs_the_node_probe_with_nothing_but_python(tmp_path: Path) -> None:
    """``python -I``: no site-packages, no gpufleet; the program carries its modules."""
    cmd = bundle.command(sys.executable, "node", ["--sections", "visible,gpu,storage"])
    cmd[1:1] = ["-I"]
    env = {"PATH": os.environ.get("PATH", ""), "CUDA_VISIBLE_DEVICES": "2,3", "RANK": "0"}
    args = ["--storage-mb", "4", "--storage-seconds", "0.5", "--no-fio"]
    res = _run([*cmd, *args], env=env, cwd=tmp_path)
    assert res["probe"] == "node"
    assert res["visible"] == {"cuda_visible_devices": "2,3", "count": 2}
    assert res["gpu"]["dcgm"]["ran"] is False
    io = res["storage"]["io"]
    assert io["tool"] == "builtin" and io["write_mbps"] > 0 and io["small_file_iops"] > 0
    assert not list(tmp_path.glob(".gpufleet-validate/io-*"))  # it cleaned up
    assert len(bundle.program()) < 64_000  # one argv string stays far below 128 KiB


def test_bundle_refuses_an_unknown_probe() -> None:
    with pytest.raises(ValueError, match="no probe"):
        bundle.command("python3", "nope")


def run_gang(world: int, args: list[str]) -> list[dict]:
    cmd = bundle.command(sys.executable, "net", args)
    port = free_port()
    procs = []
    for rank in range(world):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1")
        env["MASTER_PORT"] = str(port)
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True))
    results = []
    for p in procs:
        stdout, _ = p.communicate(timeout=60)
        results.append(next(r for r in map(common.parse_line, stdout.splitlines()) if r))
    return results


def test_network_probe_between_three_real_processes() -> None:
    results = run_gang(3, ["--mode", "pairs", "--mb", "8", "--seconds", "0.3", "--iperf3", "never"])
    links = sorted((link["src"], link["dst"]) for r in results for link in r["links"])
    assert links == [(0, 1), (0, 2), (1, 0), (1, 2), (2, 0), (2, 1)]  # every ordered pair
    for r in results:
        assert "error" not in r
        for link in r["links"]:
            assert link["gbps"] > 0 and link["rtt_ms"] > 0 and link["tool"] == "builtin"
            assert link["route"]["src"] == "127.0.0.1"


def test_a_line_that_is_not_the_probe_s_is_shown_as_it_came() -> None:
    # e.g. something else listening where a rank looked for its coordinator: the failure
    # quotes what came, not only that it was no JSON
    a, b = socket.socketpair()
    with a, b:
        b.sendall(b'{"go": 0}\nHTTP/1.1 400 Bad Request\r\n')
        assert net.recv_json(a) == {"go": 0}
        with pytest.raises(ConnectionError, match=r"not a message of the probe: b'HTTP/1.1 400"):
            net.recv_json(a)


def test_the_coordinator_closes_a_connection_that_is_not_a_rank_and_waits_on() -> None:
    # rank 0 listens where another program may look for its own server (an HTTP poll): that
    # connection is closed; the ranks still meet
    port = free_port()
    coord = net.Coordinator(2, port, rounds=1, timeout=10)
    coord.start()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as stray:
        stray.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        # closed (with the rest of the request unread, a reset is the close)
        with contextlib.suppress(ConnectionResetError):
            assert stray.recv(1) == b""
    ranks = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(2)]
    for r, s in enumerate(ranks):
        net.send_json(s, {"rank": r, "port": 1000 + r})
    tables = [net.recv_json(s)["peers"] for s in ranks]
    for s in ranks:
        net.send_json(s, {"barrier": 0})
    assert [net.recv_json(s) for s in ranks] == [{"go": 0}, {"go": 0}]
    for s in ranks:
        s.close()
    coord.join(10)
    assert coord.error is None
    assert [p["port"] for p in tables[0]] == [1000, 1001] and tables[0] == tables[1]


@pytest.mark.requires("iperf3")
def test_network_probe_uses_iperf3_where_every_rank_has_it() -> None:
    results = run_gang(2, ["--mode", "ring", "--seconds", "1"])
    for r in results:
        (link,) = r["links"]
        assert link["tool"] == "iperf3" and link["gbps"] > 0 and link["rtt_ms"] > 0, r


@pytest.mark.requires("fio")
def test_storage_uses_fio_where_installed(tmp_path: Path) -> None:
    res = storage.collect(str(tmp_path), shared=None, token="", rank=0, job="1", mb=8, seconds=1)
    io = res["io"]
    assert io["tool"] == "fio" and "error" not in io, res
    assert io["write_mbps"] > 0 and io["read_mbps"] > 0 and io["rand_read_iops"] > 0


# ----- the clock probe against a real server ----------------------------------------------


@pytest.fixture
def controller_clock() -> Iterator[str]:
    class Health(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            import time

            body = json.dumps({"ok": True, "time": time.time()}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    srv = HTTPServer(("127.0.0.1", 0), Health)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_port}"
    finally:
        srv.shutdown()


def test_clock_offset_is_near_zero_on_one_machine(controller_clock: str) -> None:
    res = clock.offset(controller_clock, samples=5)
    assert abs(res["offset_s"]) < res["rtt_s"] + 0.05
    assert res["samples"] == 5


def test_the_time_offset_hook_shifts_what_the_probe_reads(
    controller_clock: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(common.TIME_OFFSET_ENV, "-7.5")
    res = clock.offset(controller_clock, samples=3)
    assert res["offset_s"] == pytest.approx(-7.5, abs=0.2)


def test_clock_says_why_when_the_controller_is_unreachable() -> None:
    res = clock.offset(f"http://127.0.0.1:{free_port()}", samples=2)
    assert "cannot read the controller's time" in res["error"] and "probe_time" in res


# ----- the storage marker ------------------------------------------------------------------


def test_marker_is_written_by_rank_0_and_hashed_by_every_rank(tmp_path: Path) -> None:
    first = storage.marker(str(tmp_path), "tok", rank=0, job="7")
    other = storage.marker(str(tmp_path), "tok", rank=1, job="7", wait_s=1)
    want = hashlib.sha256(b"tok").hexdigest()
    assert first["marker_sha256"] == other["marker_sha256"] == want
    missing = storage.marker(str(tmp_path), "tok", rank=1, job="8", wait_s=0.2)
    assert "did not appear" in missing["error"]
    gone = storage.marker(str(tmp_path / "nope"), "tok", rank=1, job="7")
    assert "does not exist" in gone["error"]


class FakeTensor:
    def copy_(self, other: FakeTensor) -> FakeTensor:
        return self


class FakeTorch:
    """Just enough of torch's API for the GPU benchmark, which no machine here can run."""

    bfloat16, float16, float32 = "torch.bfloat16", "torch.float16", "torch.float32"

    class cuda:  # torch.cuda
        @staticmethod
        def device(dev: object) -> contextlib.AbstractContextManager[None]:
            return contextlib.nullcontext()

        @staticmethod
        def is_bf16_supported() -> bool:
            return False

        @staticmethod
        def synchronize(dev: object = None) -> None:
            pass

        @staticmethod
        def empty_cache() -> None:
            pass

        @staticmethod
        def get_device_name(dev: object) -> str:
            return "Tesla V100-SXM2-32GB"

    @staticmethod
    def device(name: str) -> str:
        return name

    @staticmethod
    def randn(*shape: int, device: object, dtype: object) -> FakeTensor:
        return FakeTensor()

    @staticmethod
    def empty(n: int, device: object, dtype: object) -> FakeTensor:
        return FakeTensor()

    @staticmethod
    def empty_like(x: FakeTensor) -> FakeTensor:
        return FakeTensor()

    @staticmethod
    def matmul(a: FakeTensor, b: FakeTensor) -> FakeTensor:
        return FakeTensor()


def test_the_gpu_benchmark_falls_back_to_fp16_without_bf16() -> None:
    res = gpu._bench_device(FakeTorch(), 0, 0.01)
    assert res["dtype"] == "float16" and res["index"] == 0
    assert res["bf16_tflops"] > 0 and res["copy_gbs"] > 0 and res["name"].startswith("Tesla")


def test_nvidia_smi_and_dcgmi_are_read_through_their_command_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stand-ins for nvidia-smi and dcgmi on PATH, answering as the real tools do."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text(
        "#!/bin/sh\n"
        'case "$1" in\n'
        f"  --query-gpu=*) cat <<'X'\n{SMI_CSV}X\n;;\n"
        f"  nvlink) cat <<'X'\n{NVLINK}X\n;;\n"
        "  *) echo '| NVIDIA-SMI 550.54.15   Driver Version: 550.54.15   CUDA Version: 12.4 |';;\n"
        "esac\n"
    )
    dcgmi = tmp_path / "dcgmi"
    doc = {"tests": [{"name": "Memory", "results": [{"status": "Fail", "info": "GPU 2 DBE"}]}]}
    dcgmi.write_text(f"#!/bin/sh\necho '{json.dumps(doc)}'\nexit 226\n")
    for tool in (smi, dcgmi):
        tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    res = gpu.smi()
    assert res["cuda_version"] == "12.4" and len(res["gpus"]) == 3
    assert res["gpus"][1]["nvlink_active"] == 1 and res["gpus"][1]["nvlink_inactive"] == 1
    d = gpu.dcgm(1)
    assert d["ran"] and d["rc"] == 226 and d["failed"] == ["Memory: GPU 2 DBE"]
