"""A frozen agent (SIGSTOP) on a live local cluster: how long its job's old attempt outlives the
start of the new one elsewhere (issue 10: "the job ran on two nodes at once for 24 s").

Each run: a job appends ``alive <attempt> <time>`` every 50 ms; its agent gets SIGSTOP; once the
job runs again elsewhere, the agent stays frozen ``--hold-s`` more, then gets SIGCONT. Printed per
run: when the controller restarted the job (after the freeze), the old attempt's last line and
the new attempt's first line, and the overlap (old last − new first: negative means the old
attempt was dead first, as it must be).

    .venv/bin/python bench/agent_freeze.py [--runs 3] [--hold-s 3] [--node-grace-s 4 --lease-s 1.5]
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import time
from pathlib import Path

from gpufleet.ops.localcluster import LocalCluster, wait_until

WRITER = (
    "import os, sys, time\n"
    "a = os.environ['GPUFLEET_ATTEMPT']\n"
    "while True:\n"
    "    with open(sys.argv[1], 'a') as f:\n"
    "        f.write(f'alive {a} {time.time():.6f}\\n')\n"
    "    time.sleep(0.05)\n"
)


def lines(path: Path) -> dict[int, list[float]]:
    by: dict[int, list[float]] = {}
    for ln in path.read_text().splitlines():
        parts = ln.split()
        if len(parts) == 3 and parts[0] == "alive":  # a line cut by a SIGKILL is skipped
            by.setdefault(int(parts[1]), []).append(float(parts[2]))
    return by


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--hold-s", type=float, default=3.0)
    ap.add_argument("--heartbeat-s", type=float, default=0.5)
    ap.add_argument("--lease-s", type=float, default=1.5)
    ap.add_argument("--node-grace-s", type=float, default=4.0)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="gpufleet-freeze-"))
    c = LocalCluster(
        root,
        agents=3,
        heartbeat_s=args.heartbeat_s,
        lease_s=args.lease_s,
        node_grace_s=args.node_grace_s,
        schedule_interval_s=0.5,
    )
    c.start()
    worst = -float("inf")
    try:
        with c.user("bench") as u:
            for run in range(args.runs):
                out = root / f"alive-{run}.txt"
                cmd = [sys.executable, "-c", WRITER, str(out)]
                (job,) = u.submit({"name": f"f{run}", "gpus_per_worker": 8, "command": cmd})
                wait_until("running", lambda j=job: u.job(j).state == "RUNNING", 60)
                wait_until("writing", lambda o=out: 1 in lines(o), 30)
                node = u.job(job).placement[0].node
                t0 = time.time()
                c.kill_agent(node, signal.SIGSTOP)
                wait_until(
                    "attempt 2",
                    lambda j=job: u.job(j).attempt == 2 and u.job(j).state == "RUNNING",
                    60,
                )
                restarted = time.time() - t0
                time.sleep(args.hold_s)
                c.kill_agent(node, signal.SIGCONT)
                by = lines(out)
                last1, first2 = max(by[1]) - t0, min(by[2]) - t0
                worst = max(worst, last1 - first2)
                print(
                    f"run {run}: restarted after {restarted:.2f} s; old attempt's last line "
                    f"{last1:.2f} s, new attempt's first {first2:.2f} s: overlap "
                    f"{last1 - first2:+.2f} s"
                )
                u.cancel(job)
                wait_until("cancelled", lambda j=job: u.job(j).state == "CANCELLED", 30)
                c.wait_nodes(3)
    finally:
        c.stop()
    print(f"worst overlap {worst:+.2f} s (negative: never on two nodes at once)")
    return 0 if worst < 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
