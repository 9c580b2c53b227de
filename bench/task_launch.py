"""What running a task as its owner costs at launch: the agent's runner starting ``/bin/true``
as the agent's own account, against as another account (as root: a mount namespace with a
private /tmp, then setpriv to the account). Prints the median and p90 milliseconds from
``launch()`` to the reaped exit, over ``--n`` launches each.

    sudo .venv/bin/python bench/task_launch.py [--n 200] [--account nobody]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from gpufleet.agent.runner import TaskRunner
from gpufleet.api.schemas import AgentCommand


def one(r: TaskRunner, i: int, run_as: str) -> float:
    cmd = AgentCommand(
        kind="launch", job=f"b{i}", attempt=0, rank=0, command=["/bin/true"], run_as=run_as
    )
    t0 = time.perf_counter()
    [ev] = r.launch(cmd)
    if ev.kind != "started":
        raise SystemExit(f"launch refused: {ev.why}")
    while not r.poll():
        time.sleep(0.0005)
    return (time.perf_counter() - t0) * 1000


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=200)
    p.add_argument("--account", default="nobody", help="the other account (must exist)")
    a = p.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root: only a root agent switches accounts")
    with tempfile.TemporaryDirectory() as d:
        r = TaskRunner(Path(d), lambda gpus: "")
        for label, run_as in (("agent's own account", ""), (f"as {a.account}", a.account)):
            ms = sorted(one(r, i, run_as) for i in range(a.n))
            p90 = ms[int(0.9 * (len(ms) - 1))]
            print(f"{label:24} median {statistics.median(ms):6.2f} ms  p90 {p90:6.2f} ms")


if __name__ == "__main__":
    main()
