"""Encoders beside training (scheduler/pack_encoders.py): by default a video job waits for a
GPU with free compute, and its Reason says that a training GPU's encoder is free but kept
apart; with ``pack_encoders`` it starts on the training GPU's encoder, with no compute share,
at most as many such jobs per GPU as the GPU has of the engine, never on an H100 (no NVENC),
never beside another video job's compute, and never where the GPU has free compute."""

from __future__ import annotations

from dataclasses import replace

from builders import cluster, cycle, node_spec, profile, running, spec, start_of
from test_scheduler_alloc import pjob

from gpufleet.core.controller import Controller
from gpufleet.core.events import JobSubmitted, TaskExited, TaskStarted
from gpufleet.model.cluster import ClusterSpec
from gpufleet.model.engines import PACK_LABEL
from gpufleet.model.job import JobState
from gpufleet.model.reason import ReasonCode
from gpufleet.scheduler.pack_encoders import video_job
from gpufleet.scheduler.snapshot import RunningJob

ENC = {"gpu_engines": (("nvenc", 1),)}


def l40s_busy_training() -> tuple[list, list[RunningJob]]:
    train = running("train", ("n00", range(2)))
    nodes = cluster(1, 2, model="L40S")
    return nodes, [train]


def encoder(name: str) -> object:
    return pjob(name, ENC, gpus=1, milli=250)


def test_a_video_job_is_one_gpu_share_asking_only_for_video_engines() -> None:
    assert video_job(encoder("e").spec)  # type: ignore[attr-defined]
    assert not video_job(pjob("w", ENC, gpus=1).spec)  # a whole GPU
    assert not video_job(pjob("g", {"gpu_engines": (("graphics", 1),)}, gpus=1, milli=250).spec)
    assert not video_job(pjob("t", gpus=1, milli=250).spec)  # no engine: compute


def test_by_default_encoders_wait_and_are_told_the_training_gpu_is_kept_apart() -> None:
    nodes, run = l40s_busy_training()
    res = cycle(nodes, [encoder("e")], run)
    assert start_of(res, "e") is None
    r = res.reasons["e"]
    assert r.code is ReasonCode.RESOURCES, r
    assert "GPU 0 of n00 is busy with training and has a free NVENC" in r.message, r.message
    assert "--pack-encoders allows it" in r.message


def test_allowed_an_encoder_shares_the_training_gpu_with_no_compute_share() -> None:
    nodes, run = l40s_busy_training()
    jobs = [encoder(f"e{i}") for i in range(7)]
    res = cycle(nodes, jobs, run, pack_encoders=True)
    placed = {j.id: start_of(res, j.id) for j in jobs}  # type: ignore[attr-defined]
    started = {k: a for k, a in placed.items() if a is not None}
    assert len(started) == 6  # two L40S GPUs, three NVENC each
    for alloc in started.values():
        ((p,),) = [alloc]
        assert p.node == "n00" and p.gpu_milli == 0 and len(p.gpus) == 1
    per_gpu = sorted(a[0].gpus[0] for a in started.values())
    assert per_gpu == [0, 0, 0, 1, 1, 1]
    assert "e6" in res.reasons  # the seventh waits


def test_no_packing_without_an_encoder_or_beside_another_video_jobs_compute() -> None:
    train = running("train", ("n00", range(8)))
    h100 = cluster(1, 8, model="H100-SXM")
    res = cycle(h100, [encoder("e")], [train], pack_encoders=True)
    assert start_of(res, "e") is None  # an H100 has no NVENC
    video = running("v", ("n00", range(2)))
    video = replace(video, spec=replace(video.spec, gpu_engines=(("nvenc", 1),)))
    nodes = cluster(1, 2, model="L40S")
    res = cycle(nodes, [encoder("e")], [video], pack_encoders=True)
    assert start_of(res, "e") is None  # the GPU's holder is no training job


def test_a_gpu_with_free_compute_takes_the_encoder_the_ordinary_way() -> None:
    train = running("train", ("n00", [0]))
    nodes = cluster(1, 2, model="L40S")
    res = cycle(nodes, [encoder("e")], [train], pack_encoders=True)
    ((p,),) = [start_of(res, "e")]
    assert p.gpus == (1,) and p.gpu_milli == 250


def test_the_core_runs_a_packed_encoder_beside_training_and_frees_nothing_twice() -> None:
    """Through the core: the launch has the training GPU and no compute share; the GPU's free
    compute stays 0 while both run, and is whole again once both end."""
    nodes = [node_spec("n00", 2, model="L40S")]
    c = Controller(profile(pack_encoders=True), ClusterSpec.build("t", nodes, ()))
    c.handle(0.0, JobSubmitted("train", spec("train", gpus=2), 0.0))
    c.handle(1.0, JobSubmitted("e", replace(spec("e", gpus=1, milli=250), **ENC), 1.0))
    (p,) = c.jobs["e"].allocation
    assert p.gpu_milli == 0 and len(p.gpus) == 1
    assert c.jobs["e"].job.state is JobState.STARTING
    assert list(c.state.nodes["n00"].gpu_free) == [0, 0]
    for t, j in ((2.0, "e"), (3.0, "train")):
        a = c.jobs[j].job.attempt
        c.handle(t, TaskStarted(j, a, 0), TaskExited(j, a, 0, 0, ""))
    assert list(c.state.nodes["n00"].gpu_free) == [1000, 1000]


def _pooled(nodes: list, value: str) -> list:
    return [replace(v, labels=((PACK_LABEL, value),)) for v in nodes]


def test_a_pool_packs_encoders_beside_training_though_the_cluster_keeps_them_apart() -> None:
    """Per pool (ADR 0059): the label ``gpufleet.io/pack-encoders: true`` (a pool's
    ``pack_encoders: true``) packs there with the controller's flag off; elsewhere not."""
    train = [running("t0", ("n00", range(2))), running("t1", ("n01", range(2)))]
    nodes = _pooled(cluster(1, 2, model="L40S"), "true") + cluster(1, 2, model="L40S", start=1)
    res = cycle(nodes, [encoder(f"e{i}") for i in range(7)], train)
    placed = {j: start_of(res, j) for j in (f"e{i}" for i in range(7))}
    assert {a[0].node for a in placed.values() if a is not None} == {"n00"}
    assert sum(a is not None for a in placed.values()) == 6  # n00's six NVENC, never n01's
    r = res.reasons["e6"]
    assert "GPU 0 of n01 is busy with training" in r.message, r.message
    assert "or a pool's pack_encoders: true" in r.message


def test_a_pool_keeps_encoders_apart_though_the_cluster_packs_them() -> None:
    nodes, run = l40s_busy_training()
    res = cycle(_pooled(nodes, "false"), [encoder("e")], run, pack_encoders=True)
    assert start_of(res, "e") is None
    msg = res.reasons["e"].message
    assert "but its pool keeps video jobs off training GPUs (the pool's pack_encoders: false)" in (
        msg
    ), msg


def test_the_cluster_spec_says_a_pools_packing_and_the_simulator_replays_it() -> None:
    from gpufleet.sim.engine import Simulation, TraceJob

    base = {"name": "ls", "count": 1, "gpu_model": "L40S", "gpus": 1, "cpu_cores": 32,
            "memory_gib": 256}  # fmt: skip
    for value, expect in ((True, 1.0), (False, 100.0)):
        cs = ClusterSpec.from_dict({"pools": [{**base, "pack_encoders": value}]})
        assert cs.nodes[0].label_map == {PACK_LABEL: "true" if value else "false"}
        jobs = [
            TraceJob("train", spec("train", gpus=1), 0.0, 100.0),
            TraceJob("e", replace(spec("e", gpus=1, milli=250), **ENC), 1.0, 10.0),
        ]
        sim = Simulation(cs, profile(backfill="none"), jobs)
        sim.run(until=1000.0)
        assert sim.outcomes["e"].first_start == expect  # packed, or when training ends
