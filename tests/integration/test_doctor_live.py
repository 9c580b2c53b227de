"""``gpufleet doctor`` on real failures in real local clusters: jobs that die of a missing
module, of their time limit and of a SIGKILL, read back through the API; a node whose GPU fell
off the bus, a node with a skewed clock and another driver, a healthy node probed by a job."""

from __future__ import annotations

import json
import sys
import time
from typing import TYPE_CHECKING

import pytest
import typer
from typer.testing import CliRunner

from gpufleet.api import schemas as s
from gpufleet.cli.doctor import app as doctor_app
from gpufleet.client import Client
from gpufleet.ops.doctor import node as node_doctor
from gpufleet.ops.doctor.finding import Severity
from gpufleet.ops.localcluster import LocalCluster
from gpufleet.ops.validate import Settings

if TYPE_CHECKING:
    from conftest import Faults

pytestmark = pytest.mark.e2e
TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED", "TIMED_OUT"}


def cli(c: LocalCluster, *args: str) -> tuple[int, dict]:
    app = typer.Typer()
    app.add_typer(doctor_app, name="doctor")
    r = CliRunner().invoke(
        app,
        ["doctor", *args, "--json", "--server", c.url, "--token-file", str(c.admin_token_file)],
    )
    assert r.stdout.strip(), r.stderr
    return r.exit_code, json.loads(r.stdout)


def run_job(a: Client, command: list[str], **kw: object) -> str:
    spec = {
        "name": "doomed",
        "gpus_per_worker": 1,
        "cpus": 1,
        "memory_gib": 1,
        "command": command,
        **kw,
    }
    (job_id,) = a.submit(spec)
    deadline = time.monotonic() + 60
    while a.job(job_id).state not in TERMINAL:
        assert time.monotonic() < deadline, a.job(job_id)
        time.sleep(0.2)
    return job_id


def by_code(doc: dict) -> dict[str, dict]:
    return {f["code"]: f for f in doc["findings"]}


def test_a_missing_module(probe_cluster: LocalCluster) -> None:
    with probe_cluster.admin() as a:
        job_id = run_job(a, [sys.executable, "-c", "import torchvision_nonexistent_ext"], workers=2)
    code, doc = cli(probe_cluster, "job", job_id)
    assert code == 1 and doc["severity"] == "error"
    f = by_code(doc)["missing_module"]
    assert "'torchvision_nonexistent_ext'" in f["cause"]
    assert "pip install torchvision_nonexistent_ext" in f["next_step"]
    # both ranks fail alike; one may be stopped with the gang before it gets that far
    assert f["target"].startswith(f"job {job_id} rank") and "ModuleNotFoundError" in f["seen"]


def test_the_time_limit(probe_cluster: LocalCluster) -> None:
    with probe_cluster.admin() as a:
        job_id = run_job(a, [sys.executable, "-c", "import time; time.sleep(60)"], time_limit_s=1)
        assert a.job(job_id).state == "TIMED_OUT"
    code, doc = cli(probe_cluster, "job", job_id)
    f = by_code(doc)["time_limit"]
    assert code == 1 and "time limit (1 s)" in f["cause"] and "time_limit_s" in f["next_step"]


def test_a_sigkill_points_at_the_oom_killer(probe_cluster: LocalCluster) -> None:
    with probe_cluster.admin() as a:
        job_id = run_job(
            a, [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"]
        )
    code, doc = cli(probe_cluster, "job", job_id)
    f = by_code(doc)["oom_killer"]
    assert code == 1 and "SIGKILL" in f["seen"] and "memory_gib" in f["next_step"]


def test_a_healthy_node_through_probe_jobs(probe_cluster: LocalCluster) -> None:
    with probe_cluster.admin() as a:  # only an admin makes a queue (Slurm's partitions)
        a.update_queue("probes", s.QueueUpdate(weight=1.0))
    code, doc = cli(probe_cluster, "node", "node-1", "--python", sys.executable, "-p", "probes")
    found = by_code(doc)
    assert code == 0 and doc["severity"] != "error", doc
    with probe_cluster.admin() as a:  # the probe jobs ran in the queue named
        names = {j.name for j in a.jobs(all_states=True, queue="probes")}
    assert "doctor-node" in names, names
    assert found["clock"]["severity"] == "ok"
    # measured against real-cluster defaults (100 MB/s): a busy test machine may fall short
    assert "storage" in found or found["storage_slow"]["severity"] == "warning"
    assert found["no_driver"]["severity"] == "info"  # simulated GPUs
    links = [f for f in doc["findings"] if f["code"] == "link"]
    ends = sorted(tuple(f["target"].split(" → ")) for f in links)  # its ring neighbours
    assert len(ends) == 2 and sum(a == "node-1" for a, _ in ends) == 1, ends
    assert sum(b == "node-1" for _, b in ends) == 1, ends


def test_local_mode_runs_the_probe_in_this_process(probe_cluster: LocalCluster) -> None:
    with probe_cluster.admin() as a:
        before = len(a.jobs(all_states=True))
        code, doc = cli(probe_cluster, "node", "node-0", "--local")
        assert len(a.jobs(all_states=True)) == before  # no probe job: it ran here
    found = by_code(doc)
    assert code == 0 and {"state", "no_driver", "clock"} <= set(found), doc
    assert "storage" in found or "storage_slow" in found


def test_a_node_whose_gpu_fell_off_the_bus(faulty_cluster: LocalCluster) -> None:
    with faulty_cluster.admin() as a:
        found = {
            f.code: f for f in node_doctor.diagnose(a, "node-1", Settings(python=sys.executable))
        }
    f = found["unhealthy"]
    assert f.severity is Severity.ERROR and "GPU 3 missing" in f.seen
    assert "fell off the PCIe bus" in f.cause and "--local" in f.next_step
    assert found["no_probe"].severity is Severity.INFO  # jobs cannot reach an unhealthy node


def test_a_node_with_a_skewed_clock_and_another_driver(
    faulty_cluster: LocalCluster, faults: Faults
) -> None:
    code, doc = cli(faulty_cluster, "node", "node-2", "--python", sys.executable)
    found = by_code(doc)
    assert code == 1
    skew = found["clock_skew"]
    assert abs(float(skew["seen"].split(" ms")[0]) - faults.clock_offset_s * 1000) < 500, skew
    assert "chronyc" in skew["next_step"]
    assert faults.odd_driver in found["driver_mismatch"]["seen"]


def test_the_cluster_overview_lists_the_sick_nodes(faulty_cluster: LocalCluster) -> None:
    code, doc = cli(faulty_cluster)
    targets = {(f["code"], f["target"]) for f in doc["findings"]}
    assert (
        code == 1
        and ("unhealthy", "node-1") in targets
        and ("driver_mismatch", "node-2") in targets
    )
