"""The GPU time used (utilization-weighted) per user, queue and hour: added to, summed per user
or queue over a period, and still there in a new Store on the same database (a restart)."""

from __future__ import annotations

import pytest

from gpufleet.server.store import Store

H = 3600.0


@pytest.mark.both_stores
def test_used_adds_up_per_hour_and_survives_a_restart(db_url: str) -> None:
    s = Store.open(db_url)
    try:
        s.add_gpu_use({("ana", "gpu", 0.0): 1800.0, ("bo", "gpu", 0.0): 3600.0})
        s.add_gpu_use({("ana", "gpu", 0.0): 1800.0, ("ana", "cpu", H): 7200.0})
    finally:
        s.close()
    s = Store.open(db_url)  # the controller restarted
    try:
        assert s.gpu_used_hours(0.0, 2 * H, "user") == {"ana": 3.0, "bo": 1.0}
        assert s.gpu_used_hours(0.0, 2 * H, "queue") == {"gpu": 2.0, "cpu": 2.0}
        # an hour counts whole in a period that overlaps it; one outside does not count
        assert s.gpu_used_hours(H + 10.0, H + 20.0, "user") == {"ana": 2.0}
        assert s.gpu_used_hours(2 * H, 3 * H, "user") == {}
    finally:
        s.close()
