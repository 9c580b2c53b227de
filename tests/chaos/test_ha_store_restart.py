"""Controllers in high availability while their PostgreSQL restarts under load (issue 26):
four clients submit 150 jobs through both addresses (each retried with its idempotency key on
a 503, as a client should); PostgreSQL is stopped as by a crash for 8 s mid-burst and started
again. Whichever controller leads afterwards (the old leader renewing, or the standby taking
over), every accepted job is stored once and succeeds once, no attempt runs twice, nothing is
left stuck — by the store and the agents' own records — and one controller leads."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from chaoshelp import Burst, PgServer, need_root, settle_and_audit

from gpufleet.ops.hacluster import HaCluster

pytestmark = [pytest.mark.chaos, pytest.mark.slow]

BURST = 150
OUTAGE_S = 8.0


@pytest.fixture
def pg() -> Iterator[PgServer]:
    need_root()
    server = PgServer()
    server.start()
    try:
        yield server
    finally:
        server.close()


def test_postgresql_restarted_mid_burst_one_leader_after_nothing_twice(
    pg: PgServer, ha_cluster: Any
) -> None:
    c: HaCluster = ha_cluster(db_url=pg.url)
    with c.user("chaos") as u:
        token = str(u.http.headers["authorization"].split()[1])
    burst = Burst(c.url, token, BURST, "hapg").start()
    burst.wait_accepted(BURST // 3, 120)
    pg.stop("immediate")
    time.sleep(OUTAGE_S)  # the outage itself: nothing to poll, it is the fault's length
    assert c.leader() is None  # nobody may lead without the store: both answer 503
    pg.start()
    c.wait_leader(60)
    burst.join(240)
    fig = settle_and_audit(c, pg.url, burst, "postgres restarted under HA", None)
    assert fig.ran_twice == 0 and fig.stuck == 0
    assert c.wait_leader(30) is not None
    assert list(c.roles().values()).count("leader") == 1
