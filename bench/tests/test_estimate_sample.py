"""bench/estimate_accuracy.py --sample: which jobs' estimates are asked for. A seeded draw per
job, from its id alone: the same jobs each run, a prefix's sample the whole trace's cut, and
about the fraction asked for."""

from __future__ import annotations

import argparse

import pytest

from bench.estimate_accuracy import fraction, sampled

IDS = [f"application_{i}" for i in range(20_000)]


def test_the_whole_fraction_takes_every_job() -> None:
    assert all(sampled(i, 1.0, seed=3) for i in IDS[:100])


@pytest.mark.parametrize("f", [0.05, 0.1, 0.5])
def test_about_the_fraction_asked_for_is_taken(f: float) -> None:
    n = sum(sampled(i, f) for i in IDS)
    # binomial: four standard deviations either side
    sd = (len(IDS) * f * (1 - f)) ** 0.5
    assert abs(n - f * len(IDS)) < 4 * sd


def test_the_same_seed_takes_the_same_jobs_and_another_seed_others() -> None:
    a = {i for i in IDS if sampled(i, 0.1, seed=0)}
    assert a == {i for i in IDS if sampled(i, 0.1, seed=0)}
    b = {i for i in IDS if sampled(i, 0.1, seed=1)}
    assert a != b
    # independent draws: the overlap is about 0.1 × 0.1 of the jobs, not 0.1
    assert len(a & b) < 0.02 * len(IDS)


def test_a_prefix_sample_is_the_whole_sample_cut() -> None:
    whole = [i for i in IDS if sampled(i, 0.2, seed=7)]
    prefix = [i for i in IDS[:3000] if sampled(i, 0.2, seed=7)]
    assert prefix == [i for i in whole if int(i.split("_")[1]) < 3000]


def test_a_smaller_fraction_takes_a_subset_of_a_larger_one() -> None:
    small = {i for i in IDS if sampled(i, 0.05, seed=2)}
    assert small <= {i for i in IDS if sampled(i, 0.2, seed=2)}


@pytest.mark.parametrize("bad", ["0", "-0.1", "1.5", "nan"])
def test_the_flag_takes_only_a_fraction_in_0_1(bad: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        fraction(bad)
    assert fraction("0.25") == 0.25 and fraction("1") == 1.0
