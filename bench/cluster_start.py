"""What a test cluster costs to start and stop: ``--n`` local clusters of ``--agents`` simulated
agents each, started (until every node has registered), asked for their nodes and stopped, one
after another, with their processes exec'd (as ``make demo`` and real nodes do) and then forked
from a zygote that has imported them (as the suite's workers do: ADR 0055). Prints the wall
seconds and the CPU seconds of every process started (reaped children: the zygote and what it
forked included) for each way.

    PYTHONPATH=src .venv/bin/python bench/cluster_start.py [--n 5] [--agents 4]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _run(how: str, n: int, agents: int) -> dict[str, float]:
    """One way's figures, measured in a process of its own (its children's CPU only)."""
    from gpufleet.ops import prefork
    from gpufleet.ops.localcluster import LocalCluster

    if how == "fork":
        prefork.enable()
    t0 = time.monotonic()
    for _ in range(n):
        with LocalCluster(Path(tempfile.mkdtemp()), agents=agents) as c, c.admin() as a:
            assert len(a.nodes()) == agents
    zygote = prefork.shared()
    if zygote is not None:
        zygote.close()
    wall = time.monotonic() - t0
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"wall_s": wall, "cpu_s": r.ru_utime + r.ru_stime}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=5)
    ap.add_argument("--agents", type=int, default=4)
    ap.add_argument("--how", choices=["exec", "fork"], help=argparse.SUPPRESS)  # one side
    a = ap.parse_args(argv)
    if a.how:
        print(json.dumps(_run(a.how, a.n, a.agents)))
        return
    got = {}
    for how in ("exec", "fork"):
        out = subprocess.run(
            [sys.executable, __file__, "--n", str(a.n), "--agents", str(a.agents), "--how", how],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        got[how] = json.loads(out.splitlines()[-1])
        print(
            f"{how}: {a.n} clusters of {a.agents} agents: {got[how]['wall_s']:.1f} s wall, "
            f"{got[how]['cpu_s']:.1f} CPU-s ({got[how]['cpu_s'] / a.n:.2f} a cluster)"
        )
    print(f"fork ÷ exec: CPU {got['fork']['cpu_s'] / got['exec']['cpu_s']:.2f}, "
          f"wall {got['fork']['wall_s'] / got['exec']['wall_s']:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
