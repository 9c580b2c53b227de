"""Chaos fixtures: a real controller and real agents on 127.0.0.1 (``LocalCluster``) that a
test then breaks (SIGSTOP, SIGKILL). Real processes: helpers poll against generous deadlines
and never assert how long something took."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from chaoshelp import stop_ha_clusters, tail

from gpufleet.ops.hacluster import HaCluster
from gpufleet.ops.localcluster import LocalCluster

# short intervals keep a run quick; lease + fence grace (2 s) + kill margin (0.5 s) <= grace
HEARTBEAT_S = 0.5
LEASE_S = 1.5
NODE_GRACE_S = 4.0
SCHEDULE_S = 0.5


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "chaos: real processes, then signals that break them")


@pytest.fixture
def chaos_cluster(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Callable[..., LocalCluster]]:
    made: list[LocalCluster] = []

    def start(agents: int = 3, **kw: Any) -> LocalCluster:
        c = LocalCluster(
            tmp_path / f"cluster{len(made)}",
            agents=agents,
            gpus="8xH100",
            heartbeat_s=HEARTBEAT_S,
            node_grace_s=NODE_GRACE_S,
            lease_s=LEASE_S,
            schedule_interval_s=SCHEDULE_S,
            **kw,
        )
        made.append(c)
        return c.start()

    failed = request.session.testsfailed
    try:
        yield start
    finally:
        for c in made:
            if request.session.testsfailed != failed:
                print(f"\n--- controller\n{tail(c.data_dir / 'controller.log')}")
                for name in c.agent_procs:
                    print(f"--- {name}\n{tail(c.data_dir / (name + '.log'), 15)}")
                    print(f"--- {name} watchdog\n{tail(c.data_dir / name / 'watchdog.log', 8)}")
            c.stop()


TOLERANCE_S = 60.0  # agents keep their tasks this long without a leader (ADR 0031)


@pytest.fixture
def ha_cluster(
    request: pytest.FixtureRequest, tmp_path: Path, pg_url: str
) -> Iterator[Callable[..., HaCluster]]:
    """Start an HaCluster (controllers with --ha) on a PostgreSQL schema of its own (the
    ``pg_url`` fixture; ``db_url=`` another database); their logs are printed on a failure."""
    made: list[HaCluster] = []

    def start(agents: int = 2, db_url: str = pg_url, **kw: Any) -> HaCluster:
        c = HaCluster(
            tmp_path / f"ha{len(made)}",
            agents=agents,
            db_url=db_url,
            heartbeat_s=0.5,
            node_grace_s=0.0,  # derived from the tolerance
            schedule_interval_s=0.5,
            **{"controller_args": ["--outage-tolerance-s", str(TOLERANCE_S)], **kw},
        )
        made.append(c)
        c.start()
        return c

    failed = request.session.testsfailed
    try:
        yield start
    finally:
        stop_ha_clusters(made, request.session.testsfailed != failed)
