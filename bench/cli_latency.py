"""How long everyday CLI commands take, as a person typing them sees it (issue 12): a real
controller and one agent (``LocalCluster``), a few jobs (some run and write output, some wait),
then each command run ``--n`` times as its own process (``python -m gpufleet.cli …``, with
``GPUFLEET_SERVER`` and ``GPUFLEET_TOKEN_FILE`` set: the admin's token), timing the wall clock
from spawn to exit. Prints the median, p90 and least wall milliseconds per command, the median
CPU time (user + system: what other work on a shared machine does not add to), and the load
average before and after.

    .venv/bin/python bench/cli_latency.py [--n 20] [--warmup 2] [--only jobs,squeue] [--json]

The Slurm shims (``gpufleet slurm-shims install``, into a temporary directory) are timed the
same way, as their executables: ``squeue``, ``sacct -j`` as submitit polls it, ``sinfo``,
``sbatch --wrap`` and ``scancel``.

``import`` is ``python -c "import gpufleet.cli.main"`` and ``python -c pass`` the interpreter's
own start: the floor under every command.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from gpufleet.ops.localcluster import LocalCluster, wait_until

if __package__ in (None, ""):  # run as a file (python bench/X.py): the checkout on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.proctime import run_timed

CLI = [sys.executable, "-m", "gpufleet.cli"]  # as the console script runs (cli/entry.py)


def _stats(runs: list[tuple[float, float]]) -> dict[str, float]:
    ms = sorted(w for w, _ in runs)
    return {
        "median_ms": round(statistics.median(ms), 1),
        "p90_ms": round(ms[int(0.9 * (len(ms) - 1))], 1),
        "min_ms": round(ms[0], 1),
        "cpu_median_ms": round(statistics.median(c for _, c in runs), 1),
    }


def measure(n: int = 20, warmup: int = 2, only: set[str] | None = None) -> dict[str, object]:
    from gpufleet.shims.install import install

    with tempfile.TemporaryDirectory() as d, LocalCluster(Path(d), agents=1) as lc:
        bindir = Path(d) / "bin"
        install(bindir)
        shim = {
            name: str(bindir / name) for name in ("sbatch", "squeue", "scancel", "sinfo", "sacct")
        }
        env = dict(os.environ)
        env.update(
            GPUFLEET_SERVER=lc.url,
            GPUFLEET_TOKEN_FILE=str(lc.admin_token_file),
            GPUFLEET_CONFIG=str(Path(d) / "none.yaml"),  # not the user's own config
            COLUMNS="200",
        )
        env.pop("GPUFLEET_TOKEN", None)
        with lc.admin() as c:
            done = c.submit({"name": "hello", "command": ["echo", "hello"], "gpus_per_worker": 1})[
                0
            ]
            for i in range(5):
                c.submit({"name": f"sleep{i}", "command": ["sleep", "600"], "gpus_per_worker": 1})
            # more than the node holds: these wait, with a Reason
            for i in range(4):
                c.submit({"name": f"big{i}", "command": ["true"], "gpus_per_worker": 8})
            wait_until("the first job's end", lambda: c.job(done).state == "SUCCEEDED", 60)
            # one job per cancel run, each cancelled once
            victims = [
                c.submit({"name": f"v{i}", "command": ["true"], "gpus_per_worker": 8})[0]
                for i in range(n + warmup)
            ]
            scancel_victims = [
                c.submit({"name": f"s{i}", "command": ["true"], "gpus_per_worker": 8})[0]
                for i in range(n + warmup)
            ]
        load_before = os.getloadavg()
        runs: dict[str, Callable[[int], list[str]]] = {
            "python -c pass": lambda i: [sys.executable, "-c", "pass"],
            "import": lambda i: [sys.executable, "-c", "import gpufleet.cli.main"],
            "--help": lambda i: [*CLI, "--help"],
            "jobs": lambda i: [*CLI, "jobs"],
            "jobs --all --json": lambda i: [*CLI, "jobs", "--all", "--json"],
            "show": lambda i: [*CLI, "show", done],
            "logs": lambda i: [*CLI, "logs", done],
            "nodes": lambda i: [*CLI, "nodes"],
            "queues": lambda i: [*CLI, "queues"],
            "submit": lambda i: [*CLI, "submit", "--name", f"b{i}", "--", "true"],
            "cancel": lambda i: [*CLI, "cancel", victims[i]],
            "shim: squeue": lambda i: [shim["squeue"]],
            "shim: sacct -j (submitit)": lambda i: [
                shim["sacct"],
                "-o",
                "JobID,State,NodeList",
                "--parsable2",
                "-j",
                done,
            ],
            "shim: sinfo": lambda i: [shim["sinfo"]],
            "shim: sbatch --wrap": lambda i: [shim["sbatch"], "-J", f"w{i}", "--wrap", "true"],
            "shim: scancel": lambda i: [shim["scancel"], scancel_victims[i]],
        }
        results: dict[str, dict[str, float]] = {}
        for name, argv in runs.items():
            if only is not None and name.removeprefix("shim: ").split()[0] not in only:
                continue
            for i in range(warmup):
                run_timed(argv(n + i), env)
            results[name] = _stats([run_timed(argv(i), env) for i in range(n)])
        return {
            "n": n,
            "cpus": os.cpu_count(),
            "load_before": [round(x, 2) for x in load_before],
            "load_after": [round(x, 2) for x in os.getloadavg()],
            "commands": results,
        }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=20, help="timed runs per command")
    p.add_argument("--warmup", type=int, default=2, help="untimed runs first")
    p.add_argument("--only", help="comma list of commands to time (first words: jobs,squeue)")
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    r = measure(a.n, a.warmup, set(a.only.split(",")) if a.only else None)
    if a.json:
        print(json.dumps(r, indent=2))
        return 0
    print(f"{r['cpus']} CPUs, load average {r['load_before']} before, {r['load_after']} after")
    print(f"{'command':28} {'median':>8} {'p90':>8} {'min':>8} {'CPU':>8}   (ms, n={r['n']})")
    cmds = r["commands"]
    assert isinstance(cmds, dict)
    for name, st in cmds.items():
        print(
            f"{name:28} {st['median_ms']:8.1f} {st['p90_ms']:8.1f} {st['min_ms']:8.1f} "
            f"{st['cpu_median_ms']:8.1f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
