"""Encoders beside training, per queue (ADR 0062): a queue's ``pack_encoders`` decides for its
video jobs over the controller's flag; a ``false`` of the queue or of the node's pool keeps
them apart, whatever the other says; the Reason names whose policy kept a waiting job apart;
the cluster spec, the store and the simulator carry it."""

from __future__ import annotations

from dataclasses import replace

import pytest
from builders import cluster, cycle, profile, running, spec, start_of
from test_scheduler_alloc import pjob

from gpufleet.model.cluster import ClusterSpec
from gpufleet.model.engines import PACK_LABEL
from gpufleet.model.errors import SpecError
from gpufleet.model.queue import QueueSpec
from gpufleet.scheduler.pack_encoders import allowed_on
from gpufleet.server.store.codec import queue_from_dict, queue_to_dict

ENC = {"gpu_engines": (("nvenc", 1),)}
RENDER = QueueSpec("render", pack_encoders=True)
DESKTOPS = QueueSpec("desktops", pack_encoders=False)


def encoder(name: str, queue: str) -> object:
    return pjob(name, {**ENC, "queue": queue}, gpus=1, milli=250)


def busy_l40s(pool: str = "") -> tuple[list, list]:
    nodes = cluster(1, 2, model="L40S")
    if pool:
        nodes = [replace(v, labels=((PACK_LABEL, pool),)) for v in nodes]
    return nodes, [running("train", ("n00", range(2)))]


@pytest.mark.parametrize(
    ("queue", "pool", "flag", "packs"),
    [
        (None, "", False, False),  # ADR 0050: the flag
        (None, "", True, True),
        (None, "true", False, True),  # ADR 0060: the pool over the flag
        (None, "false", True, False),
        (True, "", False, True),  # the queue over the flag
        (False, "", True, False),
        (True, "true", False, True),
        (False, "true", True, False),  # a false of either side keeps them apart
        (True, "false", True, False),
    ],
)
def test_a_false_of_queue_or_pool_keeps_apart_else_a_true_packs_else_the_flag(
    queue: bool | None, pool: str, flag: bool, packs: bool
) -> None:
    labels = ((PACK_LABEL, pool),) if pool else ()
    assert allowed_on(labels, flag, queue) is packs


def test_a_queue_packs_its_video_jobs_though_the_cluster_keeps_them_apart() -> None:
    nodes, run = busy_l40s()
    res = cycle(nodes, [encoder("r", "render"), encoder("d", "default")], run, queues=[RENDER])
    ((p,),) = [start_of(res, "r")]
    assert p.node == "n00" and p.gpu_milli == 0  # on the training GPU's encoder
    assert start_of(res, "d") is None  # another queue's waits, as the flag says
    assert "--pack-encoders allows it" in res.reasons["d"].message


def test_a_queue_keeps_its_video_jobs_apart_though_cluster_and_pool_pack() -> None:
    nodes, run = busy_l40s(pool="true")
    jobs = [encoder("d", "desktops"), encoder("o", "default")]
    res = cycle(nodes, jobs, run, queues=[DESKTOPS], pack_encoders=True)
    assert start_of(res, "d") is None and start_of(res, "o") is not None
    msg = res.reasons["d"].message
    assert "GPU 0 of n00 is busy with training and has a free NVENC" in msg, msg
    assert "but it is kept apart by the policy of queue desktops (its pack_encoders: false)" in msg


def test_a_pool_that_keeps_apart_holds_against_a_queue_that_packs() -> None:
    nodes, run = busy_l40s(pool="false")
    res = cycle(nodes, [encoder("r", "render")], run, queues=[RENDER], pack_encoders=True)
    assert start_of(res, "r") is None
    assert "its pool keeps video jobs off training GPUs" in res.reasons["r"].message


POOL = {"name": "ls", "count": 1, "gpu_model": "L40S", "gpus": 1, "cpu_cores": 8, "memory_gib": 64}


def test_the_cluster_spec_and_the_store_carry_a_queues_packing() -> None:
    queues = [{"name": "render", "pack_encoders": True}, {"name": "lab"}]
    cs = ClusterSpec.from_dict({"pools": [POOL], "queues": queues})
    assert [q.pack_encoders for q in cs.queues] == [True, None]
    for q in (RENDER, DESKTOPS, QueueSpec("lab")):
        assert queue_from_dict(queue_to_dict(q)) == q
    with pytest.raises(SpecError, match=r"pack_encoders.*must be true or false, got 'yes'"):
        ClusterSpec.from_dict({"pools": [POOL], "queues": [{"name": "r", "pack_encoders": "yes"}]})


@pytest.mark.parametrize(
    ("queue", "pool", "expect"),
    [(True, None, 1.0), (False, True, 100.0), (None, None, 100.0)],
)
def test_the_simulator_replays_a_queues_packing(
    queue: bool | None, pool: bool | None, expect: float
) -> None:
    from gpufleet.sim.engine import Simulation, TraceJob

    base = {"name": "ls", "count": 1, "gpu_model": "L40S", "gpus": 1, "cpu_cores": 32,
            "memory_gib": 256}  # fmt: skip
    if pool is not None:
        base["pack_encoders"] = pool
    q = {"name": "video"} if queue is None else {"name": "video", "pack_encoders": queue}
    cs = ClusterSpec.from_dict({"pools": [base], "queues": [q]})
    jobs = [
        TraceJob("train", spec("train", gpus=1), 0.0, 100.0),
        TraceJob("e", replace(spec("e", gpus=1, milli=250, queue="video"), **ENC), 1.0, 10.0),
    ]
    sim = Simulation(cs, profile(backfill="none"), jobs)
    sim.run(until=1000.0)
    assert sim.outcomes["e"].first_start == expect  # packed, or when training ends


BENCH = QueueSpec("bench", pack_encoders=False)


def test_a_queue_that_keeps_apart_keeps_video_jobs_off_its_own_training_gpus_too() -> None:
    """ADR 0065: queue bench's false protects the GPUs its training holds, whatever the flag,
    the pool or the video job's queue say; another queue's training GPUs still take it."""
    bench = running("b", ("n00", range(2)), queue="bench")
    nodes = cluster(2, 2, model="L40S")
    res = cycle(nodes[:1], [encoder("r", "render")], [bench], queues=[BENCH, RENDER],
                pack_encoders=True)  # fmt: skip
    assert start_of(res, "r") is None
    msg = res.reasons["r"].message
    assert msg.endswith(
        "; GPU 0 of n00 is busy with training and has a free NVENC, but the training there is "
        "of queue bench, whose policy keeps video jobs off its GPUs (its pack_encoders: false)"
    ), msg
    lab = running("l", ("n01", range(2)))
    res = cycle(nodes, [encoder("r", "render")], [bench, lab], queues=[BENCH, RENDER])
    ((p,),) = [start_of(res, "r")]
    assert p.node == "n01" and p.gpu_milli == 0  # beside the other queue's training
