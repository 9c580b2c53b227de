"""LAS's scheduling quality on real Philly slices, guarded (issue 24).

LAS's mean JCT against FIFO's went from 0.27 to 0.40 on Philly's September at 16 nodes × 8 GPUs
without anyone noticing: f3a1494 made a preempted attempt restart from zero (no checkpoint), and
LAS preempts the jobs that have run longest. These replays pin LAS's mean JCT to FIFO's and to
the SJF oracle's (which knows durations; LAS does not), and its p99 to FIFO's, on slices by month
and by virtual cluster, at the bounds measured when the guard was written; a change that makes
LAS worse fails here. LAS preempts as Tiresias does (the job saves its state when preempted,
``SimConfig.checkpoint_on_preempt``); the last test pins what the default costs instead.

The cluster and profile are the issue's: 16 nodes × 8 GPUs under 2 leaves, the virtual clusters
as equal-share queues, exact time limits, ``--placement topology --backfill easy --preempt
order``, LAS with Tiresias' queues (3,250 and 7,200 GPU-s, ADR 0038). The simulator is
deterministic, so the bounds are the measured ratios plus about 3 %.
The trace is read where it lies (``../shared/traces/philly/``), not shipped: without it the
tests are skipped.
"""

from __future__ import annotations

import csv
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpufleet.model.cluster import ClusterSpec
from gpufleet.sim.engine import SimConfig, TraceJob
from gpufleet.sim.replay import (
    ProfileChoice,
    equal_share_queues,
    run_replay,
    uniform_cluster,
    with_queues,
)
from gpufleet.sim.traces import TimeLimit, apply_time_limits, load_trace

PHILLY = Path(__file__).resolve().parents[2].parent / "shared/traces/philly/philly_dev.csv"

Row = dict[str, str]


@dataclass(frozen=True)
class Slice:
    """Philly jobs submitted from ``first`` to ``last`` (days, inclusive), of ``clusters`` (the
    virtual clusters; empty: all), and the bounds measured on them."""

    name: str
    first: str
    last: str
    clusters: frozenset[str]
    las_to_fifo: float  # mean JCT, at most
    las_to_sjf: float
    p99_to_fifo: float
    # the same three for ``order/las-history`` (Tiresias' LAS with the history predictor)
    history: tuple[float, float, float]

    def keeps(self) -> Callable[[Row], bool]:
        def keep(r: Row) -> bool:
            day = r["timestamp"][:10]
            return self.first <= day <= self.last and (
                not self.clusters or r["cluster"] in self.clusters
            )

        return keep


# Each slice is replayed four times (FIFO, SJF, both LAS orders): about 3-5 s of CPU a slice,
# 17 s for all five (they were 35 s: two slices of 1,772 and 2,361 jobs, now shorter windows of
# the same months and a September one; each still shows LAS's gain over FIFO, and the slices
# measured so fail their bounds when a preempted job restarts from zero, f3a1494's regression:
# LAS goes to 0.332 x FIFO on sep-25-26, 0.251 on oct-26, 1.80 on oct-16-31-vc-small and 1.47
# on vc-7f04ca-2869ce, the last test's; with ``unsaved_once``, since 2026-12-07 LAS's default
# for jobs that do not save at a stop: 0.319, 0.295, 1.167 and 0.846). The values in the
# comments are the ratios measured at fe1c7e8 (las / FIFO, las / SJF, las p99 / FIFO p99; the
# same three for las-history); each bound is its value plus 3 %.
SLICES = [
    # September's last week, two days, every virtual cluster: 1,384 jobs
    # measured 0.259, 0.914, 1.042; history 0.280, 0.987, 1.228
    Slice(
        "sep-25-26",
        "2017-09-25",
        "2017-09-26",
        frozenset(),
        0.268,
        0.942,
        1.073,
        (0.289, 1.017, 1.265),
    ),
    # a day of October's peak, every virtual cluster: 1,530 jobs
    # measured 0.220, 0.788, 1.042; history 0.223, 0.796, 1.102
    Slice(
        "oct-26", "2017-10-26", "2017-10-26", frozenset(), 0.227, 0.812, 1.074, (0.23, 0.821, 1.136)
    ),
    # November's last two days, every virtual cluster: 438 jobs
    # measured 0.865, 1.136, 1.138; history 0.767, 1.007, 1.014
    Slice(
        "nov-29-30",
        "2017-11-29",
        "2017-11-30",
        frozenset(),
        0.892,
        1.171,
        1.172,
        (0.79, 1.038, 1.045),
    ),
    # two virtual clusters of long jobs over the whole trace: 979 jobs
    # measured 0.701, 2.257, 1.270; history 0.402, 1.293, 2.078
    Slice(
        "vc-7f04ca-2869ce",
        "2017",
        "2018",
        frozenset({"7f04ca", "2869ce"}),
        0.722,
        2.325,
        1.309,
        (0.414, 1.333, 2.141),
    ),
    # four small virtual clusters in October's second half: 1,347 jobs
    # measured 0.948, 1.062, 1.258; history 0.846, 0.949, 1.330
    Slice(
        "oct-16-31-vc-small",
        "2017-10-16",
        "2017-10-31",
        frozenset({"0e4a51", "103959", "ed69ec", "e13805"}),
        0.976,
        1.095,
        1.297,
        (0.872, 0.978, 1.37),
    ),
]

LAS = ProfileChoice(order="las", placement="topology", backfill="easy", preempt=("order",))
LAS_HISTORY = ProfileChoice("las-history", "topology", "easy", ("order",))
FIFO = ProfileChoice(order="fifo", placement="topology", backfill="easy", preempt=("order",))
SJF = ProfileChoice(order="sjf", placement="topology", backfill="easy", preempt=("order",))
SAVES = SimConfig(checkpoint_on_preempt=True)


@pytest.fixture(scope="module")
def philly_rows() -> tuple[list[str], list[Row]]:
    if not PHILLY.is_file():
        pytest.skip(f"the Philly trace is not at {PHILLY}")
    with PHILLY.open(newline="") as fh:
        reader = csv.DictReader(fh)
        return list(reader.fieldnames or ()), list(reader)


def workload(
    rows: tuple[list[str], list[Row]], s: Slice, tmp_path: Path
) -> tuple[ClusterSpec, list[TraceJob]]:
    """The slice as ``gpufleet simulate replay`` reads it: a Philly CSV of its rows (submit
    times from its first job), exact limits, 16 × 8 GPUs under 2 leaves, equal-share queues."""
    header, all_rows = rows
    path = tmp_path / f"{s.name}.csv"
    with path.open("w", newline="") as fh:
        out = csv.DictWriter(fh, header)
        out.writeheader()
        keep = s.keeps()
        out.writerows(r for r in all_rows if keep(r))
    jobs = apply_time_limits(load_trace(path, "philly"), TimeLimit("exact"))
    cluster = with_queues(uniform_cluster(16, 8, 2), equal_share_queues(jobs))
    return cluster, jobs


def mean_and_p99(
    cluster: ClusterSpec, jobs: list[TraceJob], choice: ProfileChoice, cfg: SimConfig
) -> tuple[float, float]:
    m = run_replay(cluster, jobs, choice, cfg).metrics
    assert m.avg_jct_s is not None and m.p99_jct_s is not None
    assert m.jobs == len(jobs) and m.never_schedulable == 0
    return m.avg_jct_s, m.p99_jct_s


@pytest.mark.parametrize("s", SLICES, ids=lambda s: s.name)
def test_las_mean_jct_against_fifo_and_the_oracle(
    philly_rows: tuple[list[str], list[Row]], s: Slice, tmp_path: Path
) -> None:
    """Tiresias' LAS (``order/las``) and LAS with the history predictor (``order/las-history``:
    each queue ordered by what the slice's own finished jobs predict, six queues, PROMOTEKNOB
    16; still no duration known to it), each against its bounds; one test per slice, so that
    FIFO and SJF are replayed once for both."""
    cluster, jobs = workload(philly_rows, s, tmp_path)
    fifo, fifo_p99 = mean_and_p99(cluster, jobs, FIFO, SAVES)
    sjf, _ = mean_and_p99(cluster, jobs, SJF, SAVES)
    failed = []
    for choice, bounds in (
        (LAS, (s.las_to_fifo, s.las_to_sjf, s.p99_to_fifo)),
        (LAS_HISTORY, s.history),
    ):
        las, las_p99 = mean_and_p99(cluster, jobs, choice, SAVES)
        got = (las / fifo, las / sjf, las_p99 / fifo_p99)
        if any(g > b for g, b in zip(got, bounds, strict=True)):
            failed.append(f"{choice.order}: {got} above {bounds}")
    assert not failed, f"{s.name}: " + "; ".join(failed)


def test_what_las_costs_when_a_preempted_job_restarts_from_zero(
    philly_rows: tuple[list[str], list[Row]], tmp_path: Path
) -> None:
    """The regression's cause on the slice of long jobs: without a checkpoint (the simulator's
    default) a preemption throws away the victim's attempt, and Tiresias' LAS, which takes the
    longest-running jobs again and again, falls behind FIFO (``unsaved_once`` off: 1.47 x
    FIFO's mean). With the rule (the default: a job that lost an attempt is not preempted
    again once its retry holds more than the first queue's service) it is ahead of FIFO again
    (0.846), with less work thrown away; jobs that save at the signal do better still."""
    (long_jobs,) = [s for s in SLICES if s.name == "vc-7f04ca-2869ce"]
    cluster, jobs = workload(philly_rows, long_jobs, tmp_path)
    off = ProfileChoice(
        "las", "topology", "easy", ("order",), options={"order/las": {"unsaved_once": False}}
    )
    thrown = run_replay(cluster, jobs, off, SimConfig()).metrics
    default = run_replay(cluster, jobs, LAS, SimConfig()).metrics
    saved = run_replay(cluster, jobs, LAS, SAVES).metrics
    fifo, _ = mean_and_p99(cluster, jobs, FIFO, SimConfig())
    assert thrown.avg_jct_s is not None and default.avg_jct_s is not None
    assert saved.avg_jct_s is not None
    assert saved.lost_gpu_hours_preemption == 0 < default.lost_gpu_hours_preemption
    assert default.lost_gpu_hours_preemption < thrown.lost_gpu_hours_preemption
    assert thrown.avg_jct_s / fifo >= 1.4, thrown.avg_jct_s / fifo  # measured 1.47
    assert default.avg_jct_s / fifo <= 0.87, default.avg_jct_s / fifo  # measured 0.846
    assert saved.avg_jct_s < 0.6 * thrown.avg_jct_s and saved.avg_jct_s < default.avg_jct_s


# November's second half (6,519 jobs; 31 cluster-days of work submitted in 16): the issue's
# "p99 no worse than FIFO's" does not hold for LAS there. The jobs past FIFO's p99 are 4-16-GPU
# jobs of 100-500 GPU-h that start at once, then wait out 84 % of their JCT behind every
# smaller job submitted after them (not placement: their GPUs were free for 8 % of that wait; not
# churn: 11 x fewer preemptions leave p99 where it is). A bounded aging (jobs of 150 h or more
# ahead within 35 % of the GPUs, kept running; ADR 0056) and a 12 h preemption exemption bring
# p99 from 1.400 to 1.133 x FIFO's with the aged jobs let ahead oldest first, and to 1.081 with
# those the history expects to end soonest first (``aged_by: remaining``), both mean targets kept
# (0.201 -> 0.205 x FIFO, 1.296 -> 1.321 x SJF; SJF's mean is 12.10 h). Not the defaults: on
# `sep` the same options put p99 above FIFO's (0.958 -> 1.109; oldest first 1.071), and the
# exemption costs the short slices' mean (oct-26 0.223 -> 0.424 x FIFO at 100 h). Measured at
# the commit that changed this test; bounds + 3 %.
TAIL_OPTIONS = {
    "age_limit_s": 540_000.0,
    "aged_share": 0.35,
    "min_run_s": 43_200.0,
    "aged_by": "remaining",
}
# An age limit per job relative to what FIFO would have given it (ADR 0056, amended by
# h-las2): its deadline is its submission plus the expected backlog ahead of it over the
# cluster's GPUs plus its own expected run time (at least the 97th percentile of the last 1,000
# jobs' such spans), plus 4 x the run time it is still expected to need; aged jobs ahead within
# half the GPUs, nearest done first, only those let ahead kept running, a 3 h exemption. It meets
# the three targets on nov-late (0.226 x FIFO, 1.456 x SJF, p99 0.998) and on sep (0.161 /
# 0.925 / 0.961), on a knife's edge (neighbouring settings miss p99 by up to 3 %), and costs the
# long-jobs slice its mean (vc-7f04ca-2869ce 1.293 -> 1.649 x SJF): not the default.
FIFO_DEADLINE_OPTIONS = {
    "fifo_slack": 1.0,
    "fifo_floor_q": 0.97,
    "aged_slack": 4.0,
    "aged_share": 0.5,
    "aged_by": "remaining",
    "kept": "admitted",
    "min_run_s": 10_800.0,
}
NOV_LATE = Slice("nov-late", "2017-11-15", "2017-11-30", frozenset(), 0.0, 0.0, 0.0, (0, 0, 0))


@pytest.mark.slow
def test_las_history_tail_options_on_nov_late(
    philly_rows: tuple[list[str], list[Row]], tmp_path: Path
) -> None:
    cluster, jobs = workload(philly_rows, NOV_LATE, tmp_path)
    fifo, fifo_p99 = mean_and_p99(cluster, jobs, FIFO, SAVES)
    failed = []
    for options, bounds in (  # measured 0.2049, 15.99 h, 1.081; 0.2258, 17.63 h, 0.998
        (TAIL_OPTIONS, (0.211, 16.47, 1.114)),
        (FIFO_DEADLINE_OPTIONS, (0.233, 18.16, 1.028)),
    ):
        opts = {"order/las-history": options}
        choice = ProfileChoice("las-history", "topology", "easy", ("order",), options=opts)
        las, las_p99 = mean_and_p99(cluster, jobs, choice, SAVES)
        got = (las / fifo, las / 3600, las_p99 / fifo_p99)
        if any(g > b for g, b in zip(got, bounds, strict=True)):
            failed.append(f"{options}: {got} above {bounds}")
    assert not failed, "; ".join(failed)


def test_las_history_preempts_jobs_that_restart_from_zero_only_where_it_gains(
    philly_rows: tuple[list[str], list[Row]], tmp_path: Path
) -> None:
    """las-history's ``exchange`` (3, its default since 2026-12-07): a job that cannot save at a
    stop is preempted only when the history expects it to run on for more than 3 x what its
    preemptor needs plus what the stop throws away on the preemptor's GPUs. On September's
    last two days (restart from zero, the simulator's default) it takes las-history from 0.463
    to 0.324 x FIFO's mean JCT (1.630 to 1.141 x SJF's), p99 from 1.020 to 0.970 x FIFO's, with
    a sixth of the preemptions. Bounds: the measured values plus 3 %."""
    (two_days,) = [s for s in SLICES if s.name == "sep-25-26"]
    cluster, jobs = workload(philly_rows, two_days, tmp_path)
    off = ProfileChoice(
        "las-history",
        "topology",
        "easy",
        ("order",),
        options={"order/las-history": {"exchange": 0.0}},
    )
    fifo, fifo_p99 = mean_and_p99(cluster, jobs, FIFO, SimConfig())
    gains = run_replay(cluster, jobs, LAS_HISTORY, SimConfig()).metrics
    every = run_replay(cluster, jobs, off, SimConfig()).metrics
    assert gains.avg_jct_s is not None and gains.p99_jct_s is not None
    assert every.avg_jct_s is not None
    assert gains.avg_jct_s / fifo <= 0.334, gains.avg_jct_s / fifo  # measured 0.324
    assert gains.p99_jct_s / fifo_p99 <= 0.999, gains.p99_jct_s / fifo_p99  # measured 0.970
    assert every.avg_jct_s / fifo >= 0.45, every.avg_jct_s / fifo  # measured 0.463
    assert gains.preemptions * 2 < every.preemptions
