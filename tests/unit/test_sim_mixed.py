"""Graphics beside compute in the simulator: desktop sessions with a working day's load,
training kept apart from or let onto the graphics GPUs, and what each policy costs whom."""

from __future__ import annotations

from builders import spec

from gpufleet.scheduler.framework import Profile
from gpufleet.sim.engine import TraceJob
from gpufleet.sim.mixed import (
    Desktops,
    Videos,
    desktop_sessions,
    mixed_cluster,
    mixed_jobs,
    run_mixed,
    video_jobs,
)


def test_desktops_arrive_by_day_more_than_by_night_and_ask_for_graphics() -> None:
    jobs = desktop_sessions(Desktops(per_hour=30, days=4, night=0.1), seed=1)
    hours = [(j.submit_time % 86_400) / 3600 for j in jobs]
    afternoon = sum(1 for h in hours if 12 <= h < 18)
    night = sum(1 for h in hours if 0 <= h < 6)
    assert afternoon > 3 * night > 0
    assert all(j.spec.gpu_engines == (("graphics", 1),) and j.spec.gpu_milli == 250 for j in jobs)
    assert desktop_sessions(Desktops(per_hour=30, days=4, night=0.1), seed=1) == jobs  # seeded


def test_apart_keeps_training_off_the_graphics_gpus_and_together_lets_it_on() -> None:
    cluster = mixed_cluster(1, 1, graphics_gpus=4)
    # 12 one-GPU training jobs of 2 h at once: more than the training node's 8 GPUs
    training = [TraceJob(f"t{i}", spec(f"t{i}", gpus=1), 0.0, 7200.0) for i in range(12)]
    desktops = desktop_sessions(Desktops(per_hour=4, days=1), seed=2)
    profile = Profile.build(order="fifo", place="bestfit", backfill="easy", explain=False)
    apart = run_mixed(
        cluster, mixed_jobs(training, desktops, "apart", "H100-SXM"), profile, "apart"
    )
    together = run_mixed(
        cluster, mixed_jobs(training, desktops, "together", "H100-SXM"), profile, "together"
    )
    assert apart.utilization["L40S"]["training"] == 0.0
    assert together.utilization["L40S"]["training"] > 0.0
    assert apart.utilization["L40S"]["desktop"] > 0.0
    # training finishes sooner with the graphics GPUs; never later
    assert together.training_mean_jct_s is not None and apart.training_mean_jct_s is not None
    assert together.training_mean_jct_s < apart.training_mean_jct_s
    assert apart.desktops == together.desktops == len(desktops) and not apart.desktops_unstarted


def test_video_jobs_use_a_training_gpus_encoders_only_when_packing_is_allowed() -> None:
    """Training holds every L40S whole for 10 h (together); transcodes (a quarter GPU and one
    NVENC each) arrive meanwhile. Apart (the default), they wait for the training to end; with
    pack_encoders they run at once on the training GPUs' encoders, which the figures count as
    NVENC engine-time, while training's share of the GPUs stays what it was."""
    cluster = mixed_cluster(1, 1, graphics_gpus=4)
    training = [TraceJob(f"t{i}", spec(f"t{i}", gpus=1), 0.0, 36_000.0) for i in range(12)]
    videos = video_jobs(Videos(per_hour=6, days=0.25), seed=3)
    assert videos and all(dict(v.spec.gpu_engines) == {"nvenc": 1} for v in videos)
    jobs = mixed_jobs(training, [], "together", "H100-SXM", videos)
    figures = {}
    for pack in (False, True):
        profile = Profile.build(
            order="fifo", place="bestfit", backfill="easy", explain=False, pack_encoders=pack
        )
        figures[pack] = run_mixed(cluster, jobs, profile, "together")
    off, on = figures[False], figures[True]
    assert off.videos == on.videos == len(videos)
    assert off.videos_packed == 0 and on.videos_packed > 0
    assert on.video_wait_p50_s == 0.0 < (off.video_wait_p50_s or 0.0)
    assert on.engines["L40S"]["nvenc"] > 0.0 and "H100-SXM" not in on.engines  # no NVENC
    assert on.utilization["L40S"]["video"] < off.utilization["L40S"]["video"]  # no compute
    # training's GPU-time on the L40S is the same (the spans differ: off, videos run later)
    held = [f.utilization["L40S"]["training"] * f.span_s for f in (off, on)]
    assert held[0] > 0.0 and abs(held[0] - held[1]) <= 1e-3 * held[0]
