"""Contract tests: each scenario through the simulator and through a live cluster (a real
controller process and real agent processes on 127.0.0.1, simulated GPUs); the decisions must be
the same. Live, so marked ``e2e`` as the other tests with real processes: select with ``-m e2e``."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "e2e: end-to-end tests with real controller and agent processes"
    )
