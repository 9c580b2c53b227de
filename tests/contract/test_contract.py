"""The live controller and the simulator make the same decisions (issue 11's contract).

For each scenario: which job starts where (nodes and GPU indices), in which order, each job's
states in order, each attempt's ending. Compared line by line (``Decisions.lines``), so a
failure shows the decisions that differ."""

from __future__ import annotations

from pathlib import Path

import pytest
from harness import run_live, run_sim
from scenarios import SCALE, SCENARIOS, Scenario

pytestmark = pytest.mark.e2e


def _param(sc: Scenario) -> object:
    marks = [pytest.mark.xfail(strict=True, reason=sc.xfail)] if sc.xfail else []
    return pytest.param(sc, id=sc.name, marks=marks)


@pytest.mark.slow
@pytest.mark.parametrize("scenario", [_param(sc) for sc in SCENARIOS])
def test_live_decides_as_the_simulator(scenario: Scenario, tmp_path: Path) -> None:
    sim = run_sim(scenario)
    live = run_live(scenario, SCALE, tmp_path / "cluster")
    if live.lines() != sim.lines():
        _show_logs(tmp_path / "cluster")
    assert live.lines() == sim.lines()


def _show_logs(data_dir: Path) -> None:
    """With a failure: what the controller and the agents said last."""
    for log in sorted(data_dir.glob("*.log")):
        lines = log.read_text(errors="replace").splitlines()[-30:]
        print(f"--- {log.name}\n" + "\n".join(lines))
