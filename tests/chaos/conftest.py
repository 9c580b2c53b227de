"""Chaos tests: real faults (a stopped PostgreSQL, a full disk, a SIGKILLed controller) under a
live cluster of real processes. Select them with ``-m chaos``; they need root and Debian's
PostgreSQL binaries, and skip saying why without them (under CI=true they fail instead)."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "chaos: real store faults under a live cluster")
