"""End-to-end fixtures: a real controller process and real agent processes on 127.0.0.1
(``gpufleet.ops.localcluster.LocalCluster``), simulated 8-GPU nodes behind the agents' GPU
backend. Select these tests with ``-m e2e``.

These are real processes, so the helpers poll real time — always against a deadline, never
asserting how long something took (the one exception, the node-loss restart "within the grace
+ 5 s" of the issue, is measured on the controller's own event times)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from livehelp import dump_logs, make_cluster

from gpufleet.client import Client
from gpufleet.ops.localcluster import LocalCluster


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "e2e: end-to-end tests with real controller and agent processes"
    )


@pytest.fixture
def new_cluster(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Callable[..., LocalCluster]]:
    """A fresh cluster for a test that breaks it (kills an agent or the controller)."""
    made: list[LocalCluster] = []

    def start(agents: int = 3, db_url: str = "", **kw: Any) -> LocalCluster:
        c = make_cluster(tmp_path / f"cluster{len(made)}", agents, db_url, **kw)
        made.append(c)
        return c.start()

    failed = request.session.testsfailed
    try:
        yield start
    finally:
        for c in made:
            if request.session.testsfailed != failed or _failed(request):
                dump_logs(c)
            c.stop()


@pytest.fixture(scope="module")
def cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalCluster]:
    """One 4-node cluster (8 simulated H100 each) shared by the tests that leave it as it was."""
    c = make_cluster(
        tmp_path_factory.mktemp("cluster"), 4, controller_args=["--retry-backoff-s", "2"]
    )
    c.start()
    failed = request.session.testsfailed
    try:
        yield c
    finally:
        if request.session.testsfailed != failed:
            dump_logs(c)
        c.stop()


@pytest.fixture
def admin(cluster: LocalCluster) -> Iterator[Client]:
    c = cluster.admin()
    try:
        yield c
    finally:
        c.close()


def _failed(request: pytest.FixtureRequest) -> bool:
    rep = getattr(request.node, "rep_call", None)
    return bool(rep is not None and rep.failed)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    rep = yield
    setattr(item, f"rep_{rep.when}", rep)
    return rep
