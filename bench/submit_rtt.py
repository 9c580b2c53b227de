"""The wall time of the commands that talk to the controller most (issue 12, "Speed"):
``sbatch --wrap`` and ``scancel`` (the Slurm shims), ``squeue`` and ``gpufleet jobs``, each run
as its own process against a live ``LocalCluster`` (controller + 1 agent, SQLite), from spawn
to exit. Prints the median and p90 wall milliseconds, the median CPU (user + system) and the
load average while each command was timed.

    .venv/bin/python bench/submit_rtt.py [--n 15] [--rounds 2] [--trees SRC[,SRC…]] [--json]

``--trees``: the ``src`` directories to compare (default: this checkout's), each measured in a
child process with ``PYTHONPATH`` set to it (controller, agent and commands alike), the trees
taking turns for ``--rounds`` rounds so that a shared machine's load falls on each alike. Each
tree is byte-compiled first, so that no run pays for writing ``.pyc`` files.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file (python bench/X.py): the checkout on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.proctime import run_timed

SRC = Path(__file__).resolve().parents[1] / "src"
COMMANDS = ("sbatch --wrap", "scancel", "squeue", "gpufleet jobs")


def child(n: int, warmup: int) -> dict[str, object]:
    """One tree's samples: {command: {"wall": […], "cpu": […], "load": 1-min load}}."""
    from gpufleet.ops.localcluster import LocalCluster, wait_until
    from gpufleet.shims.install import install

    with tempfile.TemporaryDirectory() as d, LocalCluster(Path(d), agents=1) as lc:
        bindir = Path(d) / "bin"
        install(bindir)
        env = dict(os.environ)
        env.update(
            GPUFLEET_SERVER=lc.url,
            GPUFLEET_TOKEN_FILE=str(lc.admin_token_file),
            GPUFLEET_CONFIG=str(Path(d) / "none.yaml"),
            COLUMNS="200",
        )
        env.pop("GPUFLEET_TOKEN", None)
        with lc.admin() as c:
            done = c.submit({"name": "hello", "command": ["echo", "hi"], "gpus_per_worker": 1})[0]
            for i in range(3):
                c.submit({"name": f"sleep{i}", "command": ["sleep", "600"], "gpus_per_worker": 1})
            for i in range(3):  # more than the node holds: these wait
                c.submit({"name": f"big{i}", "command": ["true"], "gpus_per_worker": 8})
            wait_until("the first job's end", lambda: c.job(done).state == "SUCCEEDED", 60)
            victims = [
                c.submit({"name": f"v{i}", "command": ["true"], "gpus_per_worker": 8})[0]
                for i in range(n + warmup)
            ]
        runs: dict[str, Callable[[int], list[str]]] = {
            "sbatch --wrap": lambda i: [
                str(bindir / "sbatch"),
                "-J",
                f"w{i}",
                "-G",
                "8",  # waits: the queue does not fill the node with runs of `true`
                "--wrap",
                "true",
            ],
            "scancel": lambda i: [str(bindir / "scancel"), victims[i]],
            "squeue": lambda i: [str(bindir / "squeue")],
            "gpufleet jobs": lambda i: [sys.executable, "-m", "gpufleet.cli", "jobs"],
        }
        out: dict[str, object] = {}
        for name, argv in runs.items():
            for i in range(warmup):
                run_timed(argv(n + i), env)
            load = os.getloadavg()[0]
            samples = [run_timed(argv(i), env) for i in range(n)]
            out[name] = {
                "wall": [w for w, _ in samples],
                "cpu": [c for _, c in samples],
                "load": [load, os.getloadavg()[0]],
            }
        return out


def _summary(wall: list[float], cpu: list[float]) -> dict[str, float]:
    ms = sorted(wall)
    return {
        "median_ms": round(statistics.median(ms), 1),
        "p90_ms": round(ms[int(0.9 * (len(ms) - 1))], 1),
        "cpu_median_ms": round(statistics.median(cpu), 1),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=15, help="timed runs per command and round")
    p.add_argument("--warmup", type=int, default=2, help="untimed runs first")
    p.add_argument("--rounds", type=int, default=2, help="turns each tree takes")
    p.add_argument("--trees", help="comma list of src directories (default: this checkout's)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        print(json.dumps(child(a.n, a.warmup)))
        return 0
    trees = [Path(t).resolve() for t in a.trees.split(",")] if a.trees else [SRC]
    for t in trees:
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(t)], check=True)
    got: dict[str, dict[str, dict[str, list[float]]]] = {str(t): {} for t in trees}
    for _ in range(a.rounds):
        for t in trees:
            env = {**os.environ, "PYTHONPATH": str(t)}
            argv = [sys.executable, __file__, "--child", "--n", str(a.n), "--warmup", str(a.warmup)]
            r = subprocess.run(argv, env=env, capture_output=True, text=True)
            if r.returncode != 0:
                raise SystemExit(f"the run with {t} failed: {r.stderr[-2000:]}")
            for name, s in json.loads(r.stdout).items():
                mine = got[str(t)].setdefault(name, {"wall": [], "cpu": [], "load": []})
                for k in ("wall", "cpu", "load"):
                    mine[k] += s[k]
    summary: dict[str, dict[str, dict[str, Any]]] = {
        tree: {
            name: {
                **_summary(s["wall"], s["cpu"]),
                "load": [round(min(s["load"]), 2), round(max(s["load"]), 2)],
            }
            for name, s in cmds.items()
        }
        for tree, cmds in got.items()
    }
    n_total, cpus = a.n * a.rounds, os.cpu_count()
    if a.json:
        print(json.dumps({"n": n_total, "cpus": cpus, "trees": summary}, indent=2))
        return 0
    print(f"{cpus} CPUs, n={n_total} per command (ms; load: 1-min average)")
    for tree, rows in summary.items():
        print(tree)
        for name, st in rows.items():
            print(
                f"  {name:16} median {st['median_ms']:7.1f}  p90 {st['p90_ms']:7.1f}  "
                f"CPU {st['cpu_median_ms']:6.1f}  load {st['load'][0]:.2f}-{st['load'][1]:.2f}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
