"""``gpufleet simulate sweep --ray``: a real local Ray head (``ray start --head`` in a process
group of its own, two CPUs, no dashboard), the sweep's runs as Ray tasks, the same figures as
local processes give. Ray is a real part: missing, the test skips, or fails under CI=true."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.requires("ray")

START_S = 90.0  # a cold head on a busy 2-core box takes a few seconds; this is the ceiling
STOP_S = 20.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ray_cli() -> list[str]:
    script = Path(sys.executable).with_name("ray")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "from ray.scripts.scripts import main; main()"]


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """``ray start --block`` stops what it started on SIGTERM (about 2 s); what is left of its
    process group after that (gcs, raylet, workers) is killed."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=STOP_S)
    deadline = time.monotonic() + STOP_S
    while _group_alive(proc.pid) and time.monotonic() < deadline:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            break
        if proc.poll() is None:
            proc.wait(timeout=STOP_S)
        time.sleep(0.2)  # reparented daemons are reaped by init, not by us


@pytest.fixture(scope="module")
def ray_head() -> Iterator[str]:
    # short: Ray's Unix sockets live under it and a socket path is at most 107 bytes
    tmp = tempfile.mkdtemp(prefix="gfray", dir="/tmp")
    port = _free_port()
    log = Path(tmp) / "head.log"
    cmd = [
        *_ray_cli(),
        *("start", "--head", "--block", f"--port={port}", "--num-cpus=2"),
        *("--include-dashboard=false", "--disable-usage-stats", f"--temp-dir={tmp}"),
        "--object-store-memory=104857600",  # 100 MiB, not 30 % of RAM in /dev/shm
    ]
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    with log.open("wb") as out:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    try:
        deadline = time.monotonic() + START_S
        while b"Ray runtime started" not in log.read_bytes():
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the Ray head did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.2)  # an external process's start: nothing to inject a clock into
        yield f"127.0.0.1:{port}"
    finally:
        _stop(proc)
        shutil.rmtree(tmp, ignore_errors=True)


def _jobs(tmp_path: Path) -> Path:
    p = tmp_path / "jobs.jsonl"
    rows = [
        {
            "id": f"j{i}",
            "submit_time": 20.0 * i,
            "duration_s": 150.0 + 40.0 * (i % 5),
            "gpus_per_worker": (1, 2, 4, 8)[i % 4],
        }
        for i in range(16)
    ]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p


def _sweep(trace: Path, *extra: str) -> dict[str, Any]:
    cmd = [
        *(sys.executable, "-m", "gpufleet.cli.main", "simulate", "sweep"),
        *("--trace", str(trace), "--format", "jobs", "--profiles", "fifo+random,sjf+random"),
        *("--nodes", "2", "--seeds", "1,2", "--mtbf", "1200", "--repair", "100", "--json"),
        *extra,
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    doc: dict[str, Any] = json.loads(r.stdout)
    for run in doc["runs"]:
        del run["metrics"]["wall_s"]  # the machine's, not the replay's
    return doc


@pytest.mark.slow
def test_a_sweep_on_ray_gives_what_local_processes_give(ray_head: str, tmp_path: Path) -> None:
    trace = _jobs(tmp_path)
    on_ray = _sweep(trace, "--ray", ray_head)
    local = _sweep(trace, "--workers", "2")
    assert [(r["profile"], r["nodes"], r["seed"]) for r in on_ray["runs"]] == [
        ("fifo+random+easy", 2, 1),
        ("fifo+random+easy", 2, 2),
        ("sjf+random+easy", 2, 1),
        ("sjf+random+easy", 2, 2),
    ]
    assert on_ray["failed"] == 0 and "error" not in json.dumps(on_ray["runs"])
    assert on_ray == local
    # the seeds reached the runs on Ray: random placement and failures differ
    assert on_ray["runs"][0]["metrics"] != on_ray["runs"][1]["metrics"]


def test_an_address_without_ray_is_one_error_line(tmp_path: Path) -> None:
    cmd = [
        *(sys.executable, "-m", "gpufleet.cli.main", "simulate", "sweep"),
        *("--trace", str(_jobs(tmp_path)), "--format", "jobs", "--order", "fifo"),
        *("--nodes", "2", "--ray", f"127.0.0.1:{_free_port()}"),
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr[-3000:]
    assert "error: --ray: nothing answers at 127.0.0.1:" in r.stderr
    assert "ray start --head" in r.stderr
