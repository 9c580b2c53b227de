"""The issue's starvation test: a 64-GPU gang (8 × 8, with a time limit) behind a stream of
1-GPU jobs, driven through the simulator (the real Controller, a clock of event times).

Under ``easy`` backfill the gang gets a reservation once it is first in line and starts no
later than it; under ``greedy`` the same stream keeps a few GPUs busy at every instant and the
gang waits until the stream has dried up. The second half shows that the first can fail."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from builders import cluster_spec, profile, spec

from gpufleet.sim.engine import Simulation, TraceJob

STREAM = 400  # 1-GPU jobs, one every 1.5 s, 90 s each: about 60 of the 64 GPUs stay busy
GAP = 1.5
LAST_ARRIVAL = 1.0 + GAP * (STREAM - 1)


@dataclass
class Run:
    first_start: float | None
    reservations: list[tuple[float, float]] = field(default_factory=list)  # (at, start_time)


def scenario(backfill: str) -> Run:
    jobs = [
        # a burst that fills all 64 GPUs at t=0, ending one by one from t=50
        TraceJob(f"fill{i}", spec(f"fill{i}", gpus=1, limit=120.0), 0.0, 50.0 + i)
        for i in range(64)
    ]
    jobs += [
        TraceJob(f"s{i}", spec(f"s{i}", gpus=1, limit=100.0), 1.0 + GAP * i, 90.0)
        for i in range(STREAM)
    ]
    jobs.append(TraceJob("gang", spec("gang", gpus=8, workers=8, limit=500.0), 20.0, 100.0))
    sim = Simulation(cluster_spec(8, 8), profile(backfill=backfill), jobs)

    run = Run(None)
    handle = sim.controller.handle

    def spy(now, *events, **kw):
        out = handle(now, *events, **kw)
        last = sim.controller.last
        r = None if last is None else last.reservation
        if r is not None and r.job_id == "gang" and sim.outcomes["gang"].first_start is None:
            run.reservations.append((now, r.start_time))
        return out

    sim.controller.handle = spy  # type: ignore[method-assign]
    sim.run()
    run.first_start = sim.outcomes["gang"].first_start
    assert all(o.state == "SUCCEEDED" for o in sim.outcomes.values())
    return run


def test_easy_backfill_a_64_gpu_gang_does_not_starve() -> None:
    run = scenario("easy")
    assert run.reservations, "the gang never got a reservation"
    first_reserved = run.reservations[0][1]
    assert run.first_start is not None
    assert run.first_start <= first_reserved
    # and the reservation never slipped later while the stream kept coming
    assert max(start for _, start in run.reservations) <= first_reserved
    assert run.first_start < LAST_ARRIVAL / 2


def test_greedy_backfill_starves_the_same_gang() -> None:
    easy = scenario("easy")
    greedy = scenario("greedy")
    assert greedy.reservations == []
    assert greedy.first_start is not None
    assert greedy.first_start >= LAST_ARRIVAL  # only once the stream has stopped
    assert easy.first_start is not None and greedy.first_start > 4 * easy.first_start


@pytest.mark.parametrize("backfill", ["none"])
def test_strict_order_does_not_starve_it_either(backfill: str) -> None:
    run = scenario(backfill)
    assert run.first_start is not None and run.first_start < LAST_ARRIVAL / 2
