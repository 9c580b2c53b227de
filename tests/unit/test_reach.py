"""What keeps other accounts from a path: a closed directory on the way (as named, and where a
link leads), the path itself, or a file deep in a tree (a pip install under umask 077)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpufleet.base.reach import closed


@pytest.fixture
def base() -> Iterator[Path]:
    """A directory every account can reach (/var/tmp; pytest's own are 0700)."""
    d = Path(tempfile.mkdtemp(dir="/var/tmp", prefix="reach-"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def tree(base: Path) -> Path:
    root = base / "open"
    (root / "pkg" / "sub").mkdir(parents=True)
    (root / "pkg" / "sub" / "m.py").write_text("")
    (root / "tool").write_text("#!/bin/sh\n")
    for here, dirs, files in os.walk(root):
        for n in dirs:
            os.chmod(Path(here) / n, 0o755)
        for n in files:
            os.chmod(Path(here) / n, 0o755 if n == "tool" else 0o644)
    return root


def test_an_open_tree_has_nothing_closed(tree: Path) -> None:
    assert closed(tree, tree=True) is None
    assert closed(tree / "tool", run=True) is None


def test_a_closed_directory_on_the_way_names_itself_and_its_fix(tree: Path) -> None:
    (tree / "pkg").chmod(0o700)
    found = closed(tree / "pkg" / "sub" / "m.py")
    assert (
        found is not None
        and found.path == tree / "pkg"
        and found.fix == f"chmod o+x {tree / 'pkg'}"
    )
    assert found.mode == 0o700


def test_a_link_s_own_directory_counts_not_only_its_target(tree: Path, base: Path) -> None:
    hidden = base / "hidden"
    hidden.mkdir(mode=0o700)
    hidden.chmod(0o700)
    (hidden / "python").symlink_to(tree / "tool")
    found = closed(hidden / "python", run=True)
    assert found is not None and found.path == hidden


def test_a_file_deep_in_a_tree_or_a_program_others_may_not_run(tree: Path) -> None:
    (tree / "pkg" / "sub" / "m.py").chmod(0o600)
    found = closed(tree, tree=True)
    assert found is not None and found.path == tree / "pkg" / "sub" / "m.py"
    assert found.fix == f"chmod -R o+rX {tree}"
    (tree / "tool").chmod(0o744)
    found = closed(tree / "tool", run=True)
    assert found is not None and found.fix == f"chmod o+rx {tree / 'tool'}"
