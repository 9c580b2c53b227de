"""gpufleet's CLI beside a real Slurm 22.05, in one run on one machine (issue 27: "a CLI at
Slurm's pace"). Starts both: a gpufleet ``LocalCluster`` (controller + 4 agents of 4 simulated
GPUs, SQLite, the Slurm shims installed into a temporary directory) and a Slurm on loopback
(``shared/tools/slurm_local.sh``: slurmctld + 4 slurmd of 4 fake GPUs), then on each:

1. fills the 16 GPUs with ``sleep`` jobs, so that everything submitted next waits;
2. ``sbatch -G 1 --wrap true``: one submission, ``--n`` times, each its own process
   (gpufleet: its ``sbatch`` shim; and ``gpufleet submit --gpus 1 -- true``);
3. four shell loops of ``--loop`` ``sbatch`` calls at once: submissions per second;
4. tops the pending jobs up to ``--pending`` (2,000), then times ``squeue`` (all of them) and
   ``gpufleet jobs`` (its default 200, and ``--limit 10000``: all of them), ``--n`` times.

Wall milliseconds from spawn to exit (median, p90); output to a pipe, as a script reads it.

    .venv/bin/python bench/cli_vs_slurm.py [--n 30] [--loop 250] [--pending 2000] [--json]
                                           [--no-slurm]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file (python bench/X.py): the checkout on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.proctime import run_timed

ROOT = Path(__file__).resolve().parents[1]
SLURM_LOCAL = ROOT.parent / "shared" / "tools" / "slurm_local.sh"
Argv = Callable[[int], list[str]]


def timed(argv: Argv, env: dict[str, str], n: int, warmup: int = 2) -> dict[str, float]:
    for i in range(warmup):
        run_timed(argv(n + i), env, cwd=env["PWD"], pipe=True)
    runs = [run_timed(argv(i), env, cwd=env["PWD"], pipe=True) for i in range(n)]
    ms = sorted(w for w, _ in runs)
    return {
        "median_ms": round(statistics.median(ms), 1),
        "p90_ms": round(ms[int(0.9 * (len(ms) - 1))], 1),
        "min_ms": round(ms[0], 1),
        "cpu_ms": round(statistics.median(c for _, c in runs), 1),
    }


def loops(sbatch: str, env: dict[str, str], each: int, k: int = 4) -> dict[str, float]:
    """``k`` shell loops of ``each`` submissions at once: jobs per second over all of them."""
    script = f'for i in $(seq {each}); do "{sbatch}" -G 1 --wrap true >/dev/null || exit 1; done'
    t0 = time.perf_counter()
    procs = [subprocess.Popen(["bash", "-c", script], env=env, cwd=env["PWD"]) for _ in range(k)]
    codes = [p.wait() for p in procs]
    dt = time.perf_counter() - t0
    if any(codes):
        raise SystemExit(f"a loop of {sbatch} failed: {codes}")
    return {"jobs": each * k, "seconds": round(dt, 2), "jobs_per_s": round(each * k / dt, 1)}


def fill(sbatch: str, env: dict[str, str], n: int, what: list[str]) -> None:
    for _ in range(n):
        subprocess.run(
            [sbatch, *what], env=env, check=True, stdout=subprocess.DEVNULL, cwd=env["PWD"]
        )


def pending(squeue: str, env: dict[str, str]) -> int:
    out = subprocess.run(
        [squeue, "-h", "-t", "PD", "-o", "%i"], env=env, check=True, capture_output=True, text=True
    ).stdout
    return len(out.split())


def top_up(sbatch: str, squeue: str, env: dict[str, str], target: int) -> int:
    """Submit (in four loops at once) until ``target`` jobs wait; how many wait then."""
    missing = target - pending(squeue, env)
    if missing > 0:
        per, extra = divmod(missing, 4)
        loops(sbatch, env, per, 4)
        fill(sbatch, env, extra, ["-G", "1", "--wrap", "true"])
    return pending(squeue, env)


def measure(name: str, cmds: dict[str, str], env: dict[str, str], a: Any) -> dict[str, Any]:
    """The figures of one system; ``cmds``: its sbatch, squeue and (gpufleet) submit, jobs."""
    sb, sq = cmds["sbatch"], cmds["squeue"]
    print(f"[{name}] filling the GPUs", file=sys.stderr)
    fill(sb, env, 16, ["-G", "1", "--wrap", "sleep 3600"])
    time.sleep(3)  # the fillers start (both schedule within a second or two)
    r: dict[str, Any] = {}
    print(f"[{name}] one submission at a time", file=sys.stderr)
    r["sbatch"] = timed(lambda i: [sb, "-J", f"w{i}", "-G", "1", "--wrap", "true"], env, a.n)
    if "submit" in cmds:
        sub = cmds["submit"].split()
        r["submit"] = timed(
            lambda i: [*sub, "--name", f"s{i}", "--gpus", "1", "--", "true"], env, a.n
        )
    print(f"[{name}] four loops of {a.loop}", file=sys.stderr)
    r["loops"] = loops(sb, env, a.loop)
    r["pending"] = top_up(sb, sq, env, a.pending)
    print(f"[{name}] listing {r['pending']} pending jobs", file=sys.stderr)
    r["squeue"] = timed(lambda i: [sq], env, a.n)
    if "jobs" in cmds:
        jobs = cmds["jobs"].split()
        r["jobs"] = timed(lambda i: jobs, env, a.n)
        r["jobs --limit 10000"] = timed(lambda i: [*jobs, "--limit", "10000"], env, a.n)
    return r


@contextmanager
def gpufleet(d: Path) -> Iterator[tuple[dict[str, str], dict[str, str]]]:
    sys.path.insert(0, str(ROOT / "src"))
    from gpufleet.ops.localcluster import LocalCluster
    from gpufleet.shims.install import install

    # an installed gpufleet runs from its .pyc files (pip compiles a wheel's): an editable
    # checkout under PYTHONDONTWRITEBYTECODE=1 (this machine's) would compile each module on
    # every command instead, 10-20 ms of it (issue 27)
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "src" / "gpufleet")],
                   check=True, stdout=subprocess.DEVNULL)  # fmt: skip
    with LocalCluster(d / "fleet", agents=4, gpus="4xH100") as lc:
        bindir = d / "bin"
        install(bindir)
        env = dict(os.environ)
        env.update(
            GPUFLEET_SERVER=lc.url,
            GPUFLEET_TOKEN_FILE=str(lc.admin_token_file),
            GPUFLEET_CONFIG=str(d / "none.yaml"),  # not the user's own config
            COLUMNS="200",
            PWD=str(d),  # the jobs' working directory: their output files go there
        )
        env.pop("GPUFLEET_TOKEN", None)
        gf = shutil.which("gpufleet", path=str(Path(sys.executable).parent)) or (
            f"{sys.executable} -m gpufleet.cli"
        )
        yield (
            env,
            {
                "sbatch": str(bindir / "sbatch"),
                "squeue": str(bindir / "squeue"),
                "submit": f"{gf} submit",
                "jobs": f"{gf} jobs",
            },
        )


@contextmanager
def slurm(d: Path) -> Iterator[tuple[dict[str, str], dict[str, str]]]:
    if not shutil.which("slurmctld"):
        raise SystemExit("no slurmctld: apt-get install slurm-wlm munge (or pass --no-slurm)")
    state = d / "slurm"
    env = {**os.environ, "SLURM_LOCAL_PORT_BASE": os.environ.get("SLURM_LOCAL_PORT_BASE", "17600")}
    subprocess.run(["bash", str(SLURM_LOCAL), "start", str(state)], env=env, check=True,
                   stdout=subprocess.DEVNULL)  # fmt: skip
    env["SLURM_CONF"] = str(state / "etc" / "slurm.conf")
    env["PWD"] = str(d)  # the jobs' working directory: their slurm-N.out files go there
    try:
        yield env, {"sbatch": shutil.which("sbatch") or "sbatch", "squeue": "squeue"}
    finally:
        subprocess.run(["scancel", "--user", os.environ.get("USER", "root")], env=env)
        subprocess.run(["bash", str(SLURM_LOCAL), "stop", str(state)], env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip


TARGETS = {  # issue 27's, for gpufleet
    "sbatch": ("median_ms", 25.0),
    "submit": ("median_ms", 40.0),
    "loops": ("jobs_per_s", 100.0),
    "squeue": ("median_ms", 60.0),
    "jobs": ("median_ms", 60.0),
}


def table(res: dict[str, Any]) -> str:
    fleet, sl = res["gpufleet"], res.get("slurm", {})
    lines = [
        f"{res['machine']}, {res['date']}, n={res['n']} per command "
        f"(load {res['load'][0]}-{res['load'][1]})",
        f"{'figure':34} {'gpufleet':>10} {'slurm':>10} {'ratio':>7} {'target':>8}"
        "   CPU ms: gpufleet  slurm",
    ]
    rows = [
        ("sbatch --wrap, median ms", "sbatch", "median_ms", "sbatch"),
        ("gpufleet submit, median ms", "submit", "median_ms", "sbatch"),
        ("4 loops of sbatch, jobs/s", "loops", "jobs_per_s", "loops"),
        (f"squeue ({fleet['pending']} pending), median ms", "squeue", "median_ms", "squeue"),
        ("gpufleet jobs (200), median ms", "jobs", "median_ms", "squeue"),
        ("gpufleet jobs --limit 10000, ms", "jobs --limit 10000", "median_ms", "squeue"),
    ]
    for label, key, field, other in rows:
        ours = fleet[key][field]
        theirs = sl.get(other, {}).get(field)
        ratio = f"{ours / theirs:.2f}" if theirs else "-"
        target = TARGETS.get(key)
        tgt = f"{'≥' if field == 'jobs_per_s' else '≤'}{target[1]:g}" if target else "-"
        cpu = f"{fleet[key].get('cpu_ms', '-'):>18} {sl.get(other, {}).get('cpu_ms', '-'):>6}"
        lines.append(
            f"{label:34} {ours:>10} {'-' if theirs is None else theirs:>10} {ratio:>7} {tgt:>8}"
            + (cpu if field == "median_ms" else "")
        )
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=30, help="timed runs per command")
    p.add_argument("--loop", type=int, default=250, help="submissions per shell loop (4 loops)")
    p.add_argument("--pending", type=int, default=2000, help="pending jobs squeue lists")
    p.add_argument("--no-slurm", action="store_true", help="measure gpufleet only")
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    load0 = os.getloadavg()[0]
    res: dict[str, Any] = {
        "n": a.n,
        "machine": f"{platform.node()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        if not a.no_slurm:
            with slurm(d) as (env, cmds):
                res["slurm"] = measure("slurm", cmds, env, a)
        with gpufleet(d) as (env, cmds):
            res["gpufleet"] = measure("gpufleet", cmds, env, a)
    res["load"] = [round(load0, 2), round(os.getloadavg()[0], 2)]
    print(json.dumps(res, indent=2) if a.json else table(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
