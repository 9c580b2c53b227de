"""The install tests' once-per-run parts (tests/support/installs.py): made by the first to ask,
reused by the rest, made again after a failure."""

from __future__ import annotations

from pathlib import Path

import pytest

from support import installs


@pytest.fixture(autouse=True)
def run_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(installs.RUN_DIR, str(tmp_path / "run"))
    return tmp_path / "run"


def test_a_part_is_made_once_and_then_reused() -> None:
    made: list[Path] = []

    def make(where: Path) -> None:
        made.append(where)
        (where / "thing").write_text("x")

    first = installs.made_once("thing", make)
    again = installs.made_once("thing", make)
    assert first == again and made == [first] and (first / "thing").read_text() == "x"


def test_a_part_whose_making_failed_is_made_again_from_nothing() -> None:
    def broken(where: Path) -> None:
        (where / "half").write_text("x")
        raise AssertionError("pip failed")

    with pytest.raises(AssertionError, match="pip failed"):
        installs.made_once("thing", broken)
    where = installs.made_once("thing", lambda where: (where / "whole").write_text("y"))
    assert sorted(p.name for p in where.iterdir()) == [".made", "whole"]


def test_the_wheelhouse_holds_what_installing_from_the_checkout_needs() -> None:
    wanted = installs.requirements()
    assert any(r.startswith("setuptools") for r in wanted)  # pip builds a checkout isolated
    assert any(r.startswith("fastapi") for r in wanted)  # the server extra
    assert any(r.startswith("pyyaml") for r in wanted)
