"""One child process timed: wall and CPU milliseconds (user + system, from the children's
rusage). CPU is what other work on a loaded machine does not add to, so the command-line
benches report both (bench/cli_latency.py, submit_rtt.py, cli_vs_slurm.py, client_transports.py).
"""

from __future__ import annotations

import resource
import subprocess
import time


def children_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_timed(
    argv: list[str],
    env: dict[str, str],
    *,
    cwd: str | None = None,
    name: str | None = None,
    pipe: bool = False,
) -> tuple[float, float]:
    """Wall and CPU milliseconds of one run of ``argv``, its output to /dev/null (``pipe``: to
    a pipe, as a script reading it gets it); a failed run ends the bench, naming the command
    (``name``, else ``argv``) and the tail of its stderr."""
    out = subprocess.PIPE if pipe else subprocess.DEVNULL
    c0, t0 = children_cpu_s(), time.perf_counter()
    r = subprocess.run(argv, env=env, cwd=cwd, stdout=out, stderr=subprocess.PIPE)
    dt, dc = time.perf_counter() - t0, children_cpu_s() - c0
    if r.returncode != 0:
        what = name or " ".join(argv)
        raise SystemExit(f"{what} failed ({r.returncode}): {r.stderr.decode()[-2000:]}")
    return dt * 1000, dc * 1000
