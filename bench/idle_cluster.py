"""What an idle test cluster costs: a local cluster of ``--agents`` simulated agents (the tests'
timings: heartbeat 1 s, lease 1.5 s), started, left idle ``--seconds``, then stopped. Prints
the CPU seconds each of its processes used while idle (psutil, user + system), summed by kind
(controller, agent, watchdog), and the whole as a share of one core (ADR 0067).

    PYTHONPATH=src .venv/bin/python bench/idle_cluster.py [--agents 4] [--seconds 30] [--json]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import psutil  # type: ignore[import-untyped]

from gpufleet.ops.localcluster import LocalCluster


def kind(cmdline: list[str]) -> str:
    line = " ".join(cmdline)
    if "watchdog.py" in line:
        return "watchdog"
    if "gpufleet.agent" in line:
        return "agent"
    if " controller " in f"{line} ":
        return "controller"
    return "other"


def cpu(p: psutil.Process) -> float:
    t = p.cpu_times()
    return float(t.user + t.system)


def measure(agents: int, seconds: float) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as d:
        c = LocalCluster(Path(d), agents=agents, prefork=False)
        c.start()
        try:
            time.sleep(2.0)  # the agents' registrations and first heartbeats over
            procs = psutil.Process().children(recursive=True)
            before = {p.pid: cpu(p) for p in procs}
            time.sleep(seconds)
            used: dict[str, float] = {}
            for p in procs:
                try:
                    k = kind(p.cmdline())
                    used[k] = used.get(k, 0.0) + cpu(p) - before[p.pid]
                except psutil.Error:
                    continue
        finally:
            c.stop()
    out = {k: round(v, 3) for k, v in sorted(used.items())}
    out["total"] = round(sum(used.values()), 3)
    out["core_percent"] = round(100 * sum(used.values()) / seconds, 2)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--agents", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    r = measure(a.agents, a.seconds)
    print(json.dumps(r) if a.json else "\n".join(f"{k:>13}: {v}" for k, v in r.items()))


if __name__ == "__main__":
    main()
