"""Which CPython runs gpufleet fastest on this machine: each candidate (``python3`` on PATH and
the other CPython 3.11+ installed) times the same pure-Python work, best of several rounds;
``--pick`` prints the one ``make`` makes ``.venv`` from (ADR 0068): the fastest, where it is at
least ``MARGIN`` faster than ``python3`` and can make a virtual environment, else ``python3``.

Why: the suite and the controller spend their CPU in the interpreter's loop, and builds of one
CPython differ by how they were compiled: one built with profile-guided optimisation and LTO
(Debian's, python.org's) ran this suite's Python 10-20 % faster than one built without
(pyenv's default build), measured in BENCHMARKS.md. Standard library only: it runs before
``.venv`` exists, under whatever ``python3`` the machine has.

    python3 bench/interpreter.py [--pick] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass

MARGIN = 1.05  # a candidate must be this much faster than python3 to replace it
NAMES = ("python3", "python3.11", "python3.12", "python3.13", "python3.14")
PLACES = ("/usr/bin", "/usr/local/bin")

# What the candidate runs: object creation, attribute and dict access, calls and string
# formatting (the shape of the scheduler's and the server's Python), best of ROUNDS.
WORK = r"""
import json, sys, time
ok = sys.implementation.name == "cpython" and sys.version_info >= (3, 11)
try:
    import ensurepip, venv
    venv_ok = bool(ensurepip.version())
except Exception:
    venv_ok = False

class Job:
    __slots__ = ("id", "gpus", "prio")
    def __init__(self, i):
        self.id, self.gpus, self.prio = f"j{i}", i % 8 + 1, (i * 7919) % 101

def rnd(n):
    free = {f"n{k}": 8 for k in range(64)}
    placed = 0
    for job in sorted((Job(i) for i in range(n)), key=lambda j: (-j.prio, j.id)):
        for node, left in free.items():
            if left >= job.gpus:
                free[node] = left - job.gpus
                placed += 1
                break
    return placed

best = float("inf")
for _ in range(int(sys.argv[1])):
    t = time.perf_counter()
    rnd(4000)
    best = min(best, time.perf_counter() - t)
print(json.dumps({"ok": ok, "venv": venv_ok, "version": sys.version.split()[0], "s": best}))
"""
ROUNDS = 7


@dataclass(frozen=True)
class Candidate:
    path: str  # as found (the realpath decides what is the same interpreter)
    version: str
    seconds: float  # the work's best round
    usable: bool  # CPython 3.11+ that can make a venv (pip through ensurepip)


def candidates() -> list[str]:
    """``python3`` on PATH first, then the others, each interpreter once (by its realpath)."""
    found: list[str] = []
    seen: set[str] = set()
    paths = [shutil.which(n) for n in NAMES]
    paths += [os.path.join(d, n) for d in PLACES for n in NAMES]
    for p in paths:
        if p and os.access(p, os.X_OK) and os.path.realpath(p) not in seen:
            seen.add(os.path.realpath(p))
            found.append(p)
    return found


def measure(path: str, rounds: int = ROUNDS) -> Candidate | None:
    try:
        out = subprocess.run(
            [path, "-I", "-c", WORK, str(rounds)], capture_output=True, text=True, timeout=60
        )
        r = json.loads(out.stdout)
    except (OSError, ValueError, subprocess.SubprocessError):
        return None
    return Candidate(path, r["version"], float(r["s"]), bool(r["ok"] and r["venv"]))


def pick(measured: list[Candidate], margin: float = MARGIN) -> Candidate | None:
    """The first (``python3`` on PATH) unless a usable one is ``margin`` times faster; None
    when none is usable."""
    usable = [c for c in measured if c.usable]
    if not usable:
        return None
    first, fastest = usable[0], min(usable, key=lambda c: c.seconds)
    return fastest if first.seconds >= margin * fastest.seconds else first


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pick", action="store_true", help="print only the chosen interpreter")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    measured = [c for c in (measure(p) for p in candidates()) if c is not None]
    chosen = pick(measured)
    if a.pick:
        if chosen is None:
            sys.exit("no CPython 3.11+ with venv found")
        print(chosen.path)
    elif a.json:
        print(
            json.dumps(
                {"candidates": [asdict(c) for c in measured], "chosen": chosen and chosen.path}
            )
        )
    else:
        base = measured[0].seconds if measured else 0.0
        for c in measured:
            mark = "*" if chosen is not None and c.path == chosen.path else " "
            speed = base / c.seconds if c.seconds else 0.0
            print(
                f"{mark} {c.path:<28} {c.version:<8} {c.seconds * 1000:7.1f} ms  "
                f"{speed:4.2f}x python3{'' if c.usable else '  (cannot make a venv)'}"
            )


if __name__ == "__main__":
    main()
