"""Encoders beside training, live (ADR 0050): a controller started with --pack-encoders, an
agent with simulated L40S GPUs held whole by a training job; a transcode-shaped job (a GPU
share, NVENC only) starts on one of the training job's GPUs, told that GPU and no compute
share, and runs to its end while the training runs on."""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.ops.localcluster import LocalCluster
from support.waiting import wait_for

pytestmark = pytest.mark.e2e


def test_a_video_job_runs_on_a_training_gpus_encoder(new_cluster: Any) -> None:
    c: LocalCluster = new_cluster(agents=1, gpus="2xL40S", controller_args=["--pack-encoders"])
    train = {"name": "train", "gpus_per_worker": 2, "command": ["sleep", "300"]}
    say = "echo $CUDA_VISIBLE_DEVICES $NVIDIA_DRIVER_CAPABILITIES"
    video = {"name": "video", "gpus_per_worker": 1, "gpu_milli": 250,
             "gpu_engines": {"nvenc": 1}, "command": ["sh", "-c", say]}  # fmt: skip
    with c.admin() as a:
        (tid,) = a.submit(train)
        wait_for("training runs", lambda: a.job(tid).state == "RUNNING", 60)
        (vid,) = a.submit(video)
        wait_for("the video job ends", lambda: a.job(vid).state in ("SUCCEEDED", "FAILED"), 60)
        j = a.job(vid)
        assert j.state == "SUCCEEDED", a.logs(vid).data
        (p,) = j.placement
        assert p.gpu_milli == 0 and p.gpus[0] in a.job(tid).placement[0].gpus
        wait_for("its log", lambda: a.logs(vid).complete, 30)
        uuid, caps = a.logs(vid).data.split()
        assert uuid and "video" in caps.split(",")
        assert a.job(tid).state == "RUNNING"
        a.cancel(tid)
