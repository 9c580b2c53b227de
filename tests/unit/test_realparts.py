"""A real part that is missing skips its tests, saying why — and fails them under CI=true, so a
CI run can never stay green while PostgreSQL (or Prometheus, or Chromium) was not there."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import realparts

ROOT = Path(__file__).resolve().parents[2]
CLOSED_PG = "postgresql+psycopg://postgres@127.0.0.1:1/test"  # nothing listens on port 1


@pytest.mark.parametrize(
    ("ci", "outcome"), [("", pytest.skip.Exception), ("true", pytest.fail.Exception)]
)
def test_missing_skips_or_under_ci_fails(
    monkeypatch: pytest.MonkeyPatch, ci: str, outcome: type[BaseException]
) -> None:
    monkeypatch.setenv("CI", ci)
    with pytest.raises(outcome, match="promtool is not installed"):
        realparts.missing("promtool is not installed")


def test_optional_parts_skip_even_under_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.skip.Exception):
        realparts.optional("no CAP_NET_ADMIN")


def test_an_unreachable_postgres_is_retried_then_named() -> None:
    why = realparts._postgres(CLOSED_PG, wait_s=1.5)
    assert why is not None and CLOSED_PG in why and "for 1.5 s" in why


def test_unknown_parts_are_a_mistake_in_the_test() -> None:
    with pytest.raises(KeyError, match="unknown real part 'postgress'"):
        realparts.why_missing("postgress")


def run_pg_test(ci: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "CI": ci,
        "GPUFLEET_TEST_PG": CLOSED_PG,
        "GPUFLEET_TEST_PG_WAIT_S": "1",
    }
    test = "tests/integration/test_store.py::test_spec_round_trips_through_the_database"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-rs", "-p", "no:cacheprovider", f"{test}[postgresql]"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_postgres_test_fails_under_ci_and_skips_outside_it() -> None:
    """The whole path: the ``db_url`` fixture of a real store test, in a pytest of its own."""
    ci = run_pg_test("true")
    assert ci.returncode == 1, ci.stdout + ci.stderr
    assert "CI=true: a missing real part fails the run" in ci.stdout
    local = run_pg_test("")
    assert local.returncode == 0, local.stdout + local.stderr
    assert "SKIPPED" in local.stdout and "PostgreSQL unreachable at" in local.stdout


def test_a_marked_test_fails_under_ci_when_its_tool_is_not_on_the_path() -> None:
    """``@pytest.mark.requires("promtool")``, with a PATH that cannot have it."""
    test = "tests/integration/test_prometheus.py::test_promtool_checks_the_rules"
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", test],
        cwd=ROOT,
        env={**os.environ, "CI": "true", "PATH": str(Path(sys.executable).parent)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 1, r.stdout + r.stderr
    assert "promtool is not installed" in r.stdout and "CI=true" in r.stdout
