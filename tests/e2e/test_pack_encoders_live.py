"""Encoders beside training, live (ADR 0050): a controller started with --pack-encoders, an
agent with simulated L40S GPUs held whole by a training job; a transcode-shaped job (a GPU
share, NVENC only) starts on one of the training job's GPUs, told that GPU and no compute
share, and runs to its end while the training runs on. A queue's own policy (ADR 0062) keeps
its video jobs apart until an admin takes it away; a queue's node set (ADR 0066) keeps its jobs
on a labelled node."""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.api import schemas as s
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


def test_a_queue_keeps_its_video_jobs_apart_until_its_policy_is_taken_away(
    new_cluster: Any,
) -> None:
    """Per queue (ADR 0062), through the API: with the controller's --pack-encoders, queue
    desktops' pack_encoders: false keeps its video job waiting, told whose policy it is; the
    queue set back to "default" (the flag's word) lets the next pass pack it."""
    c: LocalCluster = new_cluster(agents=1, gpus="2xL40S", controller_args=["--pack-encoders"])
    train = {"name": "train", "gpus_per_worker": 2, "command": ["sleep", "300"]}
    video = {"name": "desk", "queue": "desktops", "gpus_per_worker": 1, "gpu_milli": 250,
             "gpu_engines": {"nvenc": 1}, "command": ["sleep", "300"]}  # fmt: skip
    with c.admin() as a:
        q = a.update_queue("desktops", s.QueueUpdate(pack_encoders=False))
        assert q.pack_encoders is False
        assert next(x for x in a.queues() if x.name == "desktops").pack_encoders is False
        (tid,) = a.submit(train)
        wait_for("training runs", lambda: a.job(tid).state == "RUNNING", 60)
        (vid,) = a.submit(video)
        said = "kept apart by the policy of queue desktops (its pack_encoders: false)"
        wait_for("its Reason", lambda: said in _reason(a, vid), 30)
        assert a.job(vid).state == "PENDING"
        assert (
            a.update_queue("desktops", s.QueueUpdate(pack_encoders="default")).pack_encoders is None
        )
        wait_for("the video job runs", lambda: a.job(vid).state == "RUNNING", 60)
        (p,) = a.job(vid).placement
        assert p.gpu_milli == 0 and p.gpus[0] in a.job(tid).placement[0].gpus
        a.cancel(vid)
        a.cancel(tid)


def _reason(a: Any, job: str) -> str:
    r = a.job(job).reason
    return "" if r is None else str(r.message)


def test_a_queues_shares_run_only_where_gpus_are_shared_its_way(new_cluster: Any) -> None:
    """A queue's gpu_sharing (ADR 0064), live: node-0 time-slices its GPUs, node-1 shares them
    by MPS; queue desktops set to [mps] through the API; its quarter-GPU jobs land on node-1
    and are told their MPS share, while the same job of another queue is free to go anywhere;
    with only time-slicing nodes left to it the Reason says so."""
    c: LocalCluster = new_cluster(agents=1, gpus="1xL40S")
    c.start_agent(1, "--simulate", "1xL40S", "--gpu-sharing", "mps")
    c.wait_nodes(2)
    say = "echo ${CUDA_MPS_ACTIVE_THREAD_PERCENTAGE:-none}"
    job = {"name": "d", "queue": "desktops", "gpus_per_worker": 1, "gpu_milli": 250,
           "command": ["sh", "-c", say]}  # fmt: skip
    with c.admin() as a:
        assert a.update_queue("desktops", s.QueueUpdate(gpu_sharing=["mps"])).gpu_sharing == ["mps"]
        ids = [a.submit(job)[0] for _ in range(3)]
        for jid in ids:
            wait_for(f"{jid} ends", lambda j=jid: a.job(j).state in ("SUCCEEDED", "FAILED"), 60)
            assert a.job(jid).state == "SUCCEEDED", a.logs(jid).data
            assert [p.node for p in a.job(jid).placement] == ["node-1"]
            wait_for(f"{jid}'s log", lambda j=jid: a.logs(j).complete, 30)
            assert a.logs(jid).data == "25\n"  # its SM share, as MPS tells it
        said = "the policy of queue desktops lets its shares run only where GPUs are shared by mps"
        _drained_one_waits(a, "node-1", "no MPS node left", job, said)


def test_a_queues_jobs_run_only_on_its_node_set(new_cluster: Any) -> None:
    """A queue's nodes (ADR 0066), live: node-1's agent labels it pool=l40s; queue desktops is
    held to that pool through the API; its jobs land on node-1 only, and with node-1 drained
    one waits with a Reason that names the set."""
    c: LocalCluster = new_cluster(agents=1, gpus="1xL40S")
    c.start_agent(1, "--simulate", "1xL40S", "--label", "pool=l40s")
    c.wait_nodes(2)
    job = {"name": "d", "queue": "desktops", "gpus_per_worker": 1, "command": ["true"]}
    with c.admin() as a:
        held = a.update_queue("desktops", s.QueueUpdate(nodes={"pool": "l40s"}))
        assert held.nodes == {"pool": "l40s"}
        ids = [a.submit(job)[0] for _ in range(2)]
        for jid in ids:
            wait_for(f"{jid} ends", lambda j=jid: a.job(j).state in ("SUCCEEDED", "FAILED"), 60)
            assert a.job(jid).state == "SUCCEEDED"
            assert [p.node for p in a.job(jid).placement] == ["node-1"]
        said = "queue desktops runs its jobs only on nodes labelled pool=l40s (its nodes)"
        _drained_one_waits(a, "node-1", "the L40S pool is out", job, said)


def _drained_one_waits(a: Any, node: str, why: str, job: dict[str, Any], said: str) -> None:
    """``node`` drained, one more ``job`` waits, told ``said``; then it is cancelled."""
    a.drain(node, why)
    (late,) = a.submit(job)
    wait_for("its Reason", lambda: said in _reason(a, late), 30)
    assert a.job(late).state == "PENDING"
    a.cancel(late)
