"""bench/interpreter.py: which CPython ``make`` builds ``.venv`` from. The choice is tested on
given timings; the measurement runs this machine's real interpreters."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from bench.interpreter import Candidate, candidates, measure, pick

SCRIPT = Path(__file__).resolve().parents[1] / "interpreter.py"


def c(path: str, seconds: float, usable: bool = True) -> Candidate:
    return Candidate(path, "3.11.9", seconds, usable)


def test_python3_stays_unless_another_is_clearly_faster() -> None:
    assert pick([c("python3", 1.00), c("/usr/bin/python3", 0.97)]) == c("python3", 1.00)
    assert pick([c("python3", 1.00), c("/usr/bin/python3", 0.90)]) == c("/usr/bin/python3", 0.90)
    # the fastest of several, and never one that cannot make a venv or is not 3.11+
    three = [c("python3", 1.0), c("/a", 0.9), c("/b", 0.8), c("/c", 0.5, usable=False)]
    assert pick(three) == c("/b", 0.8)


def test_an_unusable_python3_gives_way_and_none_usable_picks_none() -> None:
    assert pick([c("python3", 0.5, usable=False), c("/a", 1.0)]) == c("/a", 1.0)
    assert pick([c("python3", 0.5, usable=False)]) is None
    assert pick([]) is None


def test_the_running_interpreter_is_measured_as_a_usable_cpython() -> None:
    got = measure(sys.executable, rounds=1)
    assert got is not None and got.seconds > 0
    assert got.version == sys.version.split()[0]
    assert measure("/nonexistent/python3") is None
    paths = candidates()
    assert len({os.path.realpath(p) for p in paths}) == len(paths)  # each interpreter once


def test_pick_prints_an_interpreter_that_runs() -> None:
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--pick"], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    chosen = out.stdout.strip()
    ver = subprocess.run(
        [chosen, "-c", "import sys, venv; print(sys.version_info >= (3, 11))"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert ver.stdout.strip() == "True", (chosen, ver.stderr)
