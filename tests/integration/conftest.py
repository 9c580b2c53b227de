"""Fixtures for ``gpufleet validate`` and ``gpufleet doctor`` against real local clusters
(``LocalCluster``: a controller process and agent processes on 127.0.0.1 with simulated GPUs).

``probe_cluster``: three healthy 8-GPU nodes. ``faulty_cluster``: four nodes, each with one
fault — node-1's GPU 3 falls off the bus (``--inject offbus@gpu3``), node-2 reports another
driver (``GPUFLEET_SIM_DRIVER_VERSION``) and its probes read a clock 5 s fast (the probes'
documented testing hook ``GPUFLEET_PROBE_TIME_OFFSET_S``, which ``--task-env`` gives its
tasks), node-3 has 4 GPUs where the cluster spec (``faulty_spec``) says 8. Tests that use
them are ``e2e``: select them with ``-m e2e``.

``api``: test_api.py's controller served over HTTP in this process, for the API tests beside it
(an empty database, a ManualClock)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from gpufleet.ops.localcluster import LocalCluster
from support.waiting import wait_for

if TYPE_CHECKING:
    from test_api import Api

FAST = {"heartbeat_s": 0.5, "lease_s": 1.5, "node_grace_s": 4.0, "schedule_interval_s": 0.5}
ODD_DRIVER = "535.104.05"
CLOCK_OFFSET_S = 5.0


@dataclass(frozen=True)
class Faults:
    """What ``faulty_cluster`` injected (tests read it through the ``faults`` fixture: a test
    module never imports a conftest, whose module name is not unique)."""

    odd_driver: str = ODD_DRIVER
    clock_offset_s: float = CLOCK_OFFSET_S


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "e2e: end-to-end tests with real controller and agent processes"
    )


@pytest.fixture
def api(db_url: str, tmp_path: Path) -> Iterator[Api]:
    """test_api.py's controller over HTTP, on the test's empty database, its clock a
    ManualClock at T0 (the API tests beside test_api.py share it)."""
    from test_api import T0, serve  # only where a test asks for it: the server's imports

    from gpufleet.base.clock import ManualClock
    from gpufleet.server.store import Store

    store = Store.open(db_url)
    try:
        with serve(store, tmp_path / "controller", ManualClock(T0)) as a:
            yield a
    finally:
        store.close()


def _dump(c: LocalCluster) -> None:
    for log in sorted(c.data_dir.glob("*.log")):
        print(f"----- {log.name} (tail)\n" + "\n".join(log.read_text().splitlines()[-40:]))


@pytest.fixture(scope="session")
def probe_cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalCluster]:
    c = LocalCluster(tmp_path_factory.mktemp("probe-cluster"), agents=3, **FAST)  # type: ignore[arg-type]
    c.start()
    failed = request.session.testsfailed
    try:
        yield c
    finally:
        if request.session.testsfailed != failed:
            _dump(c)
        c.stop()


def _with_env(extra: dict[str, str]) -> dict[str, str | None]:
    old = {k: os.environ.get(k) for k in extra}
    os.environ.update(extra)
    return old


def _restore(old: dict[str, str | None]) -> None:
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="session")
def faults() -> Faults:
    return Faults()


@pytest.fixture(scope="session")
def faulty_spec(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("spec") / "cluster.yaml"
    rows = "".join(
        f"  - {{name: node-{i}, gpus: 8, gpu_model: H100, cpu_cores: 64, memory_gib: 256}}\n"
        for i in range(4)
    )
    path.write_text(f"name: faulty\nnodes:\n{rows}")
    return path


@pytest.fixture(scope="session")
def faulty_cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalCluster]:
    # --no-heal: the faults stay as injected for the doctor and validate to find (the heal
    # loop would reset the GPUs and burn the nodes in)
    c = LocalCluster(
        tmp_path_factory.mktemp("faulty-cluster"), agents=4, controller_args=["--no-heal"],
        **FAST,  # type: ignore[arg-type]
    )  # fmt: skip
    failed = request.session.testsfailed
    try:
        c.start_controller()
        c.start_agent(0)
        c.start_agent(1, "--inject", "offbus@gpu3")
        old = _with_env({"GPUFLEET_SIM_DRIVER_VERSION": ODD_DRIVER})
        try:  # the agent reads its environment at its start; its tasks inherit none of it
            c.start_agent(2, "--task-env", f"GPUFLEET_PROBE_TIME_OFFSET_S={CLOCK_OFFSET_S}")
        finally:
            _restore(old)
        c.gpus = "4xH100"
        c.start_agent(3)
        c.wait_nodes(4)
        with c.admin() as a:  # node-1's first health report has arrived (the tests read it)
            wait_for(
                "node-1 unhealthy (GPU 3 off the bus)",
                lambda: any(n.name == "node-1" and n.state == "unhealthy" for n in a.nodes()),
                timeout_s=120,
            )
        yield c
    finally:
        if request.session.testsfailed != failed:
            _dump(c)
        c.stop()
