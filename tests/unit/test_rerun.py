"""make test's rerun of load-sensitive failures (tests/support/rerun.py): every failed test is
run again by its own id, a grouped one too (xdist's loadgroup names it NODEID@GROUP)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from support import rerun


def test_a_grouped_tests_id_loses_its_group_and_nothing_else() -> None:
    assert rerun.test_id("tests/e2e/a.py::test_x@tests/e2e/a.py") == "tests/e2e/a.py::test_x"
    assert rerun.test_id("tests/a.py::test_y[sqlite]@backup-live") == "tests/a.py::test_y[sqlite]"
    assert rerun.test_id("tests/a.py::test_z[x]") == "tests/a.py::test_z[x]"
    assert rerun.test_id("tests/broken.py") == "tests/broken.py"  # a collection error


def _suite(tmp: Path, failing: bool) -> None:
    (tmp / "test_grouped.py").write_text(
        "import pytest\n"
        "@pytest.mark.xdist_group('g')\n"
        f"def test_grouped():\n    assert {not failing}\n"
        "def test_other():\n    pass\n"
    )


@pytest.mark.parametrize("second", ["passes", "fails"])
def test_a_grouped_failure_runs_again_and_decides_the_outcome(tmp_path: Path, second: str) -> None:
    """A real pytest run under xdist's loadgroup, then the rerun: before, --last-failed
    dropped the grouped test's name and the suite ended green with the failure never rerun."""
    _suite(tmp_path, failing=True)
    pytest_cmd = [sys.executable, "-m", "pytest", "-q", "--rootdir", "."]
    first = subprocess.run(
        [*pytest_cmd, "-n", "1", "--dist", "loadgroup"], cwd=tmp_path, capture_output=True
    )
    assert first.returncode == 1
    cache = tmp_path / ".pytest_cache/v/cache/lastfailed"
    assert list(json.loads(cache.read_text())) == ["test_grouped.py::test_grouped@g"]
    _suite(tmp_path, failing=second == "fails")
    again = subprocess.run(
        [sys.executable, str(Path(rerun.__file__)), "5", *pytest_cmd],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert "test_grouped.py::test_grouped" in again.stdout
    assert again.returncode == (0 if second == "passes" else 1), again.stdout
    assert ("1 passed" if second == "passes" else "1 failed") in again.stdout


def test_more_failures_than_allowed_are_not_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / ".pytest_cache/v/cache/lastfailed"
    cache.parent.mkdir(parents=True)
    cache.write_text(json.dumps({f"tests/a.py::test_{i}": True for i in range(3)}))
    monkeypatch.chdir(tmp_path)
    assert rerun.main(["2", "false"]) == 1


def test_a_group_named_with_double_colons_is_cut_whole() -> None:
    """``--dist loadgroup`` names a shared fixture's group ``tests/integration::probe_cluster``:
    the id must lose all of it (a rerun of the id with half of it finds no test)."""
    reported = "tests/integration/test_doctor_live.py::test_a@tests/integration::probe_cluster"
    assert rerun.test_id(reported) == "tests/integration/test_doctor_live.py::test_a"
    assert rerun.test_id("tests/e2e/a.py::t[x@y]@grp") == "tests/e2e/a.py::t[x@y]"
    assert rerun.test_id("tests/e2e/a.py::t[x@y]") == "tests/e2e/a.py::t[x@y]"
