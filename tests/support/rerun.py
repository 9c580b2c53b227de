"""``make test``'s second chance for tests of real processes that failed under the parallel
pass's load: each runs once more, alone, as CPython's regrtest does with ``-w``.

The failed tests are read from pytest's cache and named on the command line, not selected with
``--last-failed``: pytest-xdist's ``loadgroup`` reports a grouped test as ``NODEID@GROUP``, which
no test of a run without xdist is called, and ``--last-failed`` drops such a name without a word
(a failure of a grouped test then ended as a green suite). A name that no longer matches a test
is an error of pytest's ("not found"), so nothing that failed can go unrun.

Usage: ``python tests/support/rerun.py AT_MOST PYTEST [ARGS...]``; exits 1 when more than
``AT_MOST`` tests failed (too many to be load), else with the rerun's status."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

CACHE = Path(".pytest_cache/v/cache/lastfailed")


def test_id(reported: str) -> str:
    """The test's node id, without the ``@GROUP`` that ``--dist loadgroup`` adds to it."""
    # the group may hold "::" itself (``@tests/integration::probe_cluster``): cut at the last
    # "@" of what follows the file, unless that "@" is inside the test's parameters
    path, sep, rest = reported.partition("::")
    name, at, group = rest.rpartition("@")
    if sep and at and "]" not in group:
        rest = name
    return f"{path}{sep}{rest}"


def failed_ids() -> list[str]:
    if not CACHE.exists():
        return []
    return sorted({test_id(k) for k in json.loads(CACHE.read_text())})


def main(argv: list[str]) -> int:
    at_most, pytest = int(argv[0]), argv[1:]
    ids = failed_ids()
    if not ids:
        print("--- the parallel pass failed, but no failed test is recorded in", CACHE)
        return 1
    if len(ids) > at_most:
        print(f"--- {len(ids)} tests failed: more than {at_most}, so not load; none runs again")
        return 1
    print(f"--- load-sensitive: {len(ids)} test(s) failed under the parallel load; each runs again")
    for i in ids:
        print("   ", i)
    return subprocess.run([*pytest, "-rA", *ids]).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
