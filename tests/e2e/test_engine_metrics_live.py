"""Per-job engine use and encoder sessions, live: an agent with simulated L40S GPUs (NVENC)
runs a job given an encoder and one that is not; /metrics says one encoder session on the
encoding job's GPU and each job's own share of the engines, attributed by the agent from the
GPU's processes to the task whose process group they are in (real processes, real pids)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from gpufleet.ops.localcluster import LocalCluster
from support.waiting import wait_for

pytestmark = pytest.mark.e2e

SERIES = re.compile(r"^(\w+)\{([^}]*)\} (\S+)$")


def series(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    out = []
    for line in text.splitlines():
        m = SERIES.match(line)
        if m and m[1] == name:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m[2]))
            out.append((labels, float(m[3])))
    return out


def test_encoder_sessions_and_each_jobs_own_share_of_the_engines(new_cluster: Any) -> None:
    c: LocalCluster = new_cluster(agents=1, gpus="2xL40S")
    encode = {"name": "encode", "gpus_per_worker": 1, "gpu_engines": {"nvenc": 1},
              "command": ["sleep", "300"]}  # fmt: skip
    train = {"name": "train", "gpus_per_worker": 1, "command": ["sleep", "300"]}
    with c.admin() as a:
        (enc_id,) = a.submit(encode)
        (train_id,) = a.submit(train)
        for j in (enc_id, train_id):
            wait_for(f"job {j} running", lambda j=j: a.job(j).state == "RUNNING", 60)
        (gpu_of_enc,) = a.job(enc_id).placement[0].gpus

        def both_attributed() -> str | None:
            text = a.http.get("/metrics").text
            jobs = {lb["hpc_job"] for lb, _ in series(text, "gpufleet_job_gpu_utilization_percent")}
            return text if {enc_id, train_id} <= jobs else None

        text = wait_for("both jobs' engine use on /metrics", both_attributed, 60)
        use = {
            (lb["hpc_job"], lb["engine"]): (lb["gpu"], v)
            for lb, v in series(text, "gpufleet_job_gpu_utilization_percent")
        }
        assert use[(enc_id, "encoder")] == (str(gpu_of_enc), pytest.approx(35.0))
        assert use[(train_id, "encoder")][1] == 0.0
        assert use[(enc_id, "sm")][1] == use[(train_id, "sm")][1] == 100.0
        sessions = {lb["gpu"]: v for lb, v in series(text, "gpufleet_gpu_encoder_sessions")}
        assert sessions == {str(gpu_of_enc): 1.0, str(1 - gpu_of_enc): 0.0}
        for j in (enc_id, train_id):
            a.cancel(j)
