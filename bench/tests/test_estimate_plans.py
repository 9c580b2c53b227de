"""bench/estimate_plans.py's table: each combination of the two plans' estimates, measured
against the actual start."""

from __future__ import annotations

from bench.estimate_plans import table

H = 3600.0


def test_each_combination_is_measured_on_the_same_jobs() -> None:
    # (over the cluster, big per node, actual start): the first job started at the later
    # estimate, the second at the earlier, the third between them
    rows = [(0.0, 2 * H, 2 * H), (4 * H, 1 * H, 1 * H), (0.0, 2 * H, 1 * H)]
    out = {k.strip(): v for k, v in (line.split(": ", 1) for line in table(rows)[1:])}
    # |error| per job: later 0, 3, 1 h; earlier 2, 0, 1; mean 1, 1.5, 0; over the cluster 2, 3, 1
    assert out["the later (default)"] == "1.00 h / 3.00 h / 1.33 h"
    assert out["the earlier"] == "1.00 h / 2.00 h / 1.00 h"
    assert out["the mean"] == "1.00 h / 1.50 h / 0.83 h"
    assert out["over the cluster"] == "2.00 h / 3.00 h / 2.00 h"
    assert out["big per node"] == "0.00 h / 1.00 h / 0.33 h"


def test_no_job_that_waited_is_said_so() -> None:
    assert table([])[-1] == "no sampled job waited"
