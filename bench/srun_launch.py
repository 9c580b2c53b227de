"""What a job step costs: ``srun -N N --ntasks-per-node=K true`` inside a batch job, wall from
spawning srun to its exit, with N-1 step daemons on 127.0.0.1 standing in for the other nodes
(each with the environment its rank would get). Beside it, the interpreter alone and srun's
refusal outside a job (its import and start), so the step's own share shows."""

from __future__ import annotations

import argparse
import json
import os
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env(root: Path, slot: int, nodes: int, k: int, ports: list[int], key: str) -> dict[str, str]:
    tmp = root / f"rank{slot}"
    tmp.mkdir(exist_ok=True)
    env = {n: v for n, v in os.environ.items() if not n.startswith(("SLURM_", "GPUFLEET_"))}
    env.update(
        SLURM_JOB_ID="1",
        SLURM_JOB_NODELIST=f"n[0-{nodes - 1}]",
        SLURM_NTASKS=str(nodes * k),
        SLURM_TASKS_PER_NODE=f"{k}(x{nodes})",
        SLURMD_NODENAME=f"n{slot}",
        TMPDIR=str(tmp),
        GPUFLEET_STEP_SLOT=str(slot),
        GPUFLEET_STEP_HOSTS=",".join(f"127.0.0.1:{p}" for p in ports),
        GPUFLEET_STEP_KEY=key,
    )
    return env


def _times(argv: list[str], env: dict[str, str], n: int, ok: int = 0) -> list[float]:
    out = []
    for i in range(n + 2):
        t0 = time.perf_counter()
        r = subprocess.run(argv, env=env, capture_output=True)
        dt = (time.perf_counter() - t0) * 1000
        if r.returncode != ok:
            raise RuntimeError(r.stderr.decode())
        if i >= 2:  # two untimed: caches warm
            out.append(dt)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, default=15, help="timed runs of each")
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--tasks-per-node", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    key = secrets.token_hex(32)
    ports = [_free_port() for _ in range(a.nodes)]
    py = sys.executable
    rows: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        daemons = [
            subprocess.Popen(
                [py, "-m", "gpufleet.slurm.stepd"],
                env=_env(root, s, a.nodes, a.tasks_per_node, ports, key),
                stderr=subprocess.PIPE,
            )
            for s in range(1, a.nodes)
        ]
        try:
            for p in daemons:
                assert p.stderr is not None
                p.stderr.readline()  # listening
            env0 = _env(root, 0, a.nodes, a.tasks_per_node, ports, key)
            bare = {n: v for n, v in env0.items() if not n.startswith(("SLURM_", "GPUFLEET_"))}
            rows["python -c pass"] = _times([py, "-c", "pass"], bare, a.n)
            rows["srun outside a job (start, refuse)"] = _times(
                [py, "-m", "gpufleet.slurm.srun", "true"], bare, a.n, ok=1
            )
            step = f"srun -N{a.nodes} --ntasks-per-node={a.tasks_per_node} true"
            rows[step] = _times(
                [
                    py,
                    "-m",
                    "gpufleet.slurm.srun",
                    f"-N{a.nodes}",
                    f"--ntasks-per-node={a.tasks_per_node}",
                    "true",
                ],
                env0,
                a.n,
            )
        finally:
            for p in daemons:
                p.terminate()
                p.wait(10)
    result = {
        name: {
            "median_ms": round(statistics.median(ts), 1),
            "p90_ms": round(sorted(ts)[int(0.9 * (len(ts) - 1))], 1),
        }
        for name, ts in rows.items()
    }
    if a.json:
        print(json.dumps(result, indent=2))
    else:
        for name, r in result.items():
            print(f"{name:45s} median {r['median_ms']:7.1f} ms   p90 {r['p90_ms']:7.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
