"""Chaos fixtures: a real controller and real agents on 127.0.0.1 (``LocalCluster``) that a
test then breaks (SIGSTOP, SIGKILL). Real processes: helpers poll against generous deadlines
and never assert how long something took."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gpufleet.ops.localcluster import LocalCluster

# short intervals keep a run quick; lease + fence grace (2 s) + kill margin (0.5 s) <= grace
HEARTBEAT_S = 0.5
LEASE_S = 1.5
NODE_GRACE_S = 4.0
SCHEDULE_S = 0.5


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "chaos: real processes, then signals that break them")


def _tail(path: Path, n: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(none)"


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
                print(f"\n--- controller\n{_tail(c.data_dir / 'controller.log')}")
                for name in c.agent_procs:
                    print(f"--- {name}\n{_tail(c.data_dir / (name + '.log'), 15)}")
                    print(f"--- {name} watchdog\n{_tail(c.data_dir / name / 'watchdog.log', 8)}")
            c.stop()
