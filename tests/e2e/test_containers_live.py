"""An image job through a real controller and two real agents (root, simulated GPUs): one agent
without a container runtime (--container-runtime none), one with podman. The job is placed on
the node with the runtime, runs in the container as its owner's uid with the launch's Slurm
variables, and its output comes back through ``gpufleet logs`` as a bare job's does."""

from __future__ import annotations

import os
import pwd
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from livehelp import read_log, wait_state

from containerimage import IMAGE_ENV, build_env_image, build_image
from gpufleet.client import Client
from gpufleet.ops.localcluster import LocalCluster
from support.waiting import wait_for

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: a root agent runs podman"),
]
FAST = {"heartbeat_s": 0.5, "lease_s": 1.5, "node_grace_s": 4.0, "schedule_interval_s": 0.5}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    build_image()
    c = LocalCluster(tmp_path_factory.mktemp("ctr"), agents=0, gpus="2xH100", **FAST)  # type: ignore[arg-type]
    try:
        c.start()
        c.start_agent(0, "--container-runtime", "none")
        c.start_agent(1)  # finds podman
        c.wait_nodes(2)
        yield c
    finally:
        c.stop()
        for log in sorted(Path(c.data_dir).glob("*.log")):
            print(f"----- {log.name}\n" + "\n".join(log.read_text().splitlines()[-30:]))


def test_an_image_job_runs_in_its_container_on_the_node_with_a_runtime(
    cluster: LocalCluster,
) -> None:
    nobody = pwd.getpwnam("nobody")  # an account on the node: the job runs as it
    c: Client = cluster.user("nobody")
    script = 'echo "uid=$(id -u) node=$SLURMD_NODENAME"; echo "in=$(pwd)"; ls /bin/busybox'
    (job,) = c.submit(
        {
            "name": "ctr",
            "gpus_per_worker": 1,
            "command": ["/bin/sh", "-c", script],
            "container": {"image": "localhost/gpufleet-test:2", "workdir": "/work"},
            "time_limit_s": 300,
        }
    )

    def done() -> str | None:
        s = c.job(job).state
        return s if s in ("SUCCEEDED", "FAILED", "CANCELLED", "TIMED_OUT") else None

    assert wait_for("the job ends", done, 90) == "SUCCEEDED", c.job(job).events

    def output() -> str | None:  # the job's end and its logs' last chunk travel apart
        got = c.logs(job, stream="stdout")
        return got.data if got.complete else None

    out = wait_for("its output is complete", output, 90)
    assert f"uid={nobody.pw_uid} node=node-1" in out, out
    assert "in=/work" in out and "/bin/busybox" in out


def test_a_job_in_a_container_reports_its_metrics_through_its_tmp(cluster: LocalCluster) -> None:
    """ADR 0049 in a container: the task is told /tmp/gpufleet.metrics (its TMPDIR, mounted on
    /tmp), and its agent reads the file on the host, as the job's own (its uid's)."""
    c: Client = cluster.user("nobody")
    write = 'echo "$GPUFLEET_METRICS_FILE"; printf "fps 12.5\\n" > "$GPUFLEET_METRICS_FILE"'
    (job,) = c.submit(
        {
            "name": "ctr-metrics",
            "gpus_per_worker": 1,
            "command": ["/bin/sh", "-c", write],
            "container": {"image": "localhost/gpufleet-test:2"},
            "time_limit_s": 300,
        }
    )
    wait_for("the job ends", lambda: c.job(job).state in ("SUCCEEDED", "FAILED"), 90)
    assert c.job(job).state == "SUCCEEDED", c.job(job).events
    m = wait_for("its metrics", lambda: c.job(job).metrics, 30)
    assert m.values == {"fps": 12.5} and m.problems == [], m
    got = wait_for("its output", lambda: c.logs(job).data if c.logs(job).complete else None, 30)
    assert got == "/tmp/gpufleet.metrics\n"


def test_a_containers_gpu_processes_are_its_jobs(cluster: LocalCluster) -> None:
    """Per-job GPU use for a job in a podman container: the simulated GPU says a process of
    the container uses it (not podman's client, as on a real GPU), in another process group
    than the task's; the agent finds the job by the container's cgroup (its cid file's ID)."""
    c: Client = cluster.user("nobody")
    (job,) = c.submit(
        {
            "name": "ctr-gpu",
            "gpus_per_worker": 1,
            "command": ["/bin/sh", "-c", "sleep 300"],
            "container": {"image": "localhost/gpufleet-test:2"},
            "time_limit_s": 300,
        }
    )
    wait_for("it runs", lambda: c.job(job).state == "RUNNING", 90)
    with cluster.admin() as a:

        def attributed() -> str | None:
            text = a.http.get("/metrics").text
            mine = [
                line
                for line in text.splitlines()
                if line.startswith("gpufleet_job_gpu_utilization_percent{")
                and f'hpc_job="{job}"' in line
            ]
            return "\n".join(mine) or None

        lines = wait_for("the container job's GPU use on /metrics", attributed, 60)
    assert 'engine="sm"' in lines, lines
    c.cancel(job)


# what a batch script's users look for, the same bare and in a container (pyxis's sbatch
# --container-image): its user, Slurm's variables, the submitter's exported environment, its
# output file in the submit directory
BATCH = (
    'echo "uid=$(id -u) job=$SLURM_JOB_ID nodes=$SLURM_JOB_NUM_NODES submit=$FROM_SUBMIT"; '
    'echo "says=$IMAGE_SAYS"; echo to-stderr >&2'
)


def test_a_two_node_batch_job_in_a_container_behaves_as_a_bare_one(
    new_cluster: Callable[..., LocalCluster],
) -> None:
    image = build_env_image()
    # alice has no account on the node: the cluster's fallback account runs her jobs (the
    # agent's interpreter, which the step daemon runs on, is in root's home on these boxes);
    # tests/integration/test_containers_podman.py runs a container batch script as nobody
    fallback = os.geteuid()
    top = Path(tempfile.mkdtemp(prefix="gpufleet-submit-", dir="/var/tmp"))
    try:
        submit = top / "submit"
        submit.mkdir()
        cluster = new_cluster(agents=2, **FAST)
        c = cluster.user("alice")
        jobs = {}
        for where, container in (("bare", None), ("container", {"image": image})):
            spec = {
                "name": f"batch-{where}",
                "workers": 2,  # the second node runs the step daemon, on the node, not in it
                "gpus_per_worker": 1,
                "distinct_nodes": True,
                "batch": True,
                "workdir": str(submit),
                "command": ["/bin/sh", "-c", BATCH],
                "submit_env": {"FROM_SUBMIT": "yes", "IMAGE_SAYS": "host"},
                "container": container,
                "time_limit_s": 300,
            }
            (jobs[where],) = c.submit(spec)
        for where, job in jobs.items():
            done = wait_state(c, job, {"SUCCEEDED", "FAILED", "CANCELLED"}, 120)
            assert done.state == "SUCCEEDED", (where, done.events)
            out_file = submit / f"slurm-{job}.out"  # sbatch's default, opened as the user
            assert out_file.stat().st_uid == fallback
            out = out_file.read_text()
            says = IMAGE_ENV["IMAGE_SAYS"] if where == "container" else "host"
            assert out.splitlines() == [
                f"uid={fallback} job={job} nodes=2 submit=yes",
                f"says={says}",
                "to-stderr",
            ], (where, out)
            assert read_log(c, job, 0) == out.replace("to-stderr\n", "")  # gpufleet logs too
    finally:
        shutil.rmtree(top, ignore_errors=True)
