"""Render array throughput on simulated nodes: the README's render example (an sbatch array of
Blender Cycles CPU frames, then an afterok gather) submitted to a LocalCluster of N nodes of
2 simulated L40S each, frames/s from the submission to the last frame written, against one
Blender process rendering every frame on this machine (the peer: no cluster, no array).

    PYTHONPATH=src .venv/bin/python bench/render_array.py --nodes 1,2,4 --frames 24 --tasks 8
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gpufleet.ops.localcluster import LocalCluster

SCRIPT = """#!/bin/bash
#SBATCH -J render --array=1-{tasks} -c 1 -t 10 --gpus 1 -C graphics
python3 -m gpufleet.examples.render frames --frames {frames} --size {size} --samples {samples}
"""


def env_for(c: LocalCluster) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    return {**env, "GPUFLEET_SERVER": c.url, "GPUFLEET_TOKEN_FILE": str(c.admin_token_file)}


def last_frame_s(frames_dir: Path, want: int, t0_wall: float, timeout_s: float) -> float:
    """Seconds from the submission to the last of ``want`` frames written (their mtimes)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        pngs = list(frames_dir.glob("frame_*.png")) if frames_dir.is_dir() else []
        if len(pngs) == want:
            return max(p.stat().st_mtime for p in pngs) - t0_wall
        time.sleep(0.5)  # a benchmark watching files: no clock to inject
    raise TimeoutError(f"{want} frames not written in {timeout_s} s")


def on_cluster(nodes: int, a: argparse.Namespace, base: Path) -> float:
    c = LocalCluster(base / f"c{nodes}", agents=nodes, gpus="2xL40S").start()
    try:
        c.wait_nodes(nodes)
        submit = base / f"submit{nodes}"
        submit.mkdir()
        (submit / "render.sbatch").write_text(SCRIPT.format(**vars(a)))
        t0 = time.time()
        subprocess.run(
            [sys.executable, "-m", "gpufleet.cli.main", "submit", "render.sbatch"],
            cwd=submit, env=env_for(c), check=True, capture_output=True,
        )  # fmt: skip
        return last_frame_s(submit / "frames", a.frames, t0, 900)
    finally:
        c.stop()


def serial(a: argparse.Namespace, base: Path) -> float:
    """One Blender process, every frame: the render module as one array task of one."""
    env = {**os.environ, "SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_MIN": "1",
           "SLURM_ARRAY_TASK_COUNT": "1", "SLURM_CPUS_PER_TASK": "1"}  # fmt: skip
    where = base / "serial"
    where.mkdir()
    argv = ["--frames", str(a.frames), "--size", a.size, "--samples", str(a.samples)]
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-m", "gpufleet.examples.render", "frames", *argv],
                   cwd=where, env=env, check=True, capture_output=True)  # fmt: skip
    return time.monotonic() - t0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", default="1,2,4", help="node counts, comma-separated")
    p.add_argument("--frames", type=int, default=24)
    p.add_argument("--tasks", type=int, default=8, help="array tasks")
    p.add_argument("--size", default="96x72")
    p.add_argument("--samples", type=int, default=4)
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory(dir="/var/tmp") as d:
        base = Path(d)
        one = serial(a, base)
        load = os.getloadavg()[0]
        print(f"one blender process, {a.frames} frames: {one:.1f} s, "
              f"{a.frames / one:.2f} frames/s (load {load:.1f})", flush=True)  # fmt: skip
        for n in [int(x) for x in a.nodes.split(",")]:
            s = on_cluster(n, a, base)
            print(f"{n} node(s) x 2 L40S (simulated), array of {a.tasks}: submit to last frame "
                  f"{s:.1f} s, {a.frames / s:.2f} frames/s ({one / s:.2f}x the one process; "
                  f"load {os.getloadavg()[0]:.1f})", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
