"""sbatch --test-only's answer (scheduler/trial.py): when and where a job would start if it
were submitted now, from one cycle with it added; nothing in the snapshot changed. What a
real Slurm printed for the same command lines: tests/e2e/test_test_only_vs_slurm.py."""

from __future__ import annotations

from dataclasses import replace

from builders import cluster, job, profile, running, snapshot

from gpufleet.io import sbatch_command
from gpufleet.scheduler.trial import trial


def test_on_an_idle_cluster_it_starts_now_on_one_node() -> None:
    snap = snapshot(cluster(2, 4), now=100.0)
    got = trial(snap, profile(), job("t", gpus=2, cpus=3))
    assert got.start == 100.0 and len(got.nodes) == 1 and got.cpus == 3
    assert got.queue == "default" and snap.pending == ()


def test_a_gang_of_two_nodes_names_both() -> None:
    got = trial(snapshot(cluster(2, 4)), profile(), job("t", gpus=4, workers=2))
    assert sorted(got.nodes) == ["n00", "n01"] and got.cpus == 2


def test_behind_running_jobs_it_starts_when_they_end_where_they_ran() -> None:
    busy = [running("r", ("n00", range(4)), limit=600.0), running("s", ("n01", range(4)))]
    got = trial(snapshot(cluster(2, 4), running=busy, now=60.0), profile(), job("t", gpus=4))
    assert got.start == 600.0 and got.nodes == ("n00",)


def test_behind_a_pending_job_its_start_is_later_than_the_nodes_free() -> None:
    busy = [running("r", ("n00", range(4)), limit=600.0)]
    ahead = job("a", gpus=4, limit=900.0)
    snap = snapshot(cluster(1, 4), [ahead], busy, now=60.0)
    got = trial(snap, profile(), job("t", gpus=4, submit=60.0))
    assert got.start == 1500.0 and got.nodes == ("n00",)
    assert snap.pending == (ahead,)  # nothing added to what the controller holds


def test_with_no_estimate_the_start_is_unknown_and_the_nodes_where_it_could_run() -> None:
    busy = [running("r", ("n00", range(4)))]  # no time limit: it never frees its GPUs
    got = trial(snapshot(cluster(1, 4), running=busy), profile(), job("t", gpus=1))
    assert got.start is None and got.nodes == ("n00",)


def test_sbatch_reads_test_only_as_its_own_option() -> None:
    batch = sbatch_command.read(
        ["--test-only", "--gres=gpu:1", "--wrap", "true"],
        script=lambda _: "",
        environ={},
        cwd="/tmp",
        host="h",
    )
    assert batch.test_only and batch.spec["gpus_per_worker"] == 1


def test_a_job_not_eligible_before_its_begin_time_starts_then() -> None:
    late = replace(job("t", gpus=1), eligible_time=3600.0)
    got = trial(snapshot(cluster(1, 4), now=60.0), profile(), late)
    assert got.start == 3600.0 and got.nodes == ("n00",)
