"""What the nodes' answers about users' Unix accounts cost one scheduling cycle (issue 23,
ADR 0037).

The run: the headline placement workload (``gpufleet.sim.placement_bench.build``: 1,000 nodes ×
8 GPUs, 4,000 1-GPU jobs + 800 gangs by default), the pending jobs spread over ``--users``
users, in three forms: no node checks accounts (the simulator, agents not root: the cycle as
before); every node checks and has every user (a site whose accounts match); every node checks
and one user in ten lacks an account on one node in ten (those jobs placed around them). For
each, the jobs the cycle starts and its CPU time (``time.process_time()`` around
``run_cycle``, the least of ``--repeats`` cycles over the same snapshot), and the ratio to the
first form.

    PYTHONPATH=src .venv/bin/python bench/identity_cycle.py [--nodes N] [--jobs N] [--json]
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from typing import Any

from gpufleet.scheduler.cycle import run_cycle
from gpufleet.scheduler.identity import Accounts
from gpufleet.scheduler.snapshot import Snapshot
from gpufleet.sim import placement_bench as pb


def with_users(snap: Snapshot, users: int) -> Snapshot:
    pending = tuple(
        replace(p, spec=replace(p.spec, user=f"u{k % users:04d}"))
        for k, p in enumerate(snap.pending)
    )
    return replace(snap, pending=pending, pending_index=None)


def accounts(snap: Snapshot, users: int, gaps: bool) -> Accounts:
    acc = Accounts()
    for i, n in enumerate(snap.nodes):
        acc.record(
            n.name,
            ((f"u{u:04d}", None if gaps and u % 10 == 0 and i % 10 == 0 else 1000 + u)
             for u in range(users)),
        )  # fmt: skip
    return acc


def cpu_cycle(snap: Snapshot, repeats: int) -> tuple[float, int]:
    prof = pb.profile()
    best, started = float("inf"), 0
    for _ in range(repeats):
        t0 = time.process_time()
        res = run_cycle(snap, prof)
        best = min(best, time.process_time() - t0)
        started = len(res.starts)
    return best, started


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--jobs", type=int, default=4000)
    ap.add_argument("--gangs", type=int, default=800)
    ap.add_argument("--users", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    w = pb.build(nodes=a.nodes, jobs=a.jobs, gangs=a.gangs, leaves=max(1, a.nodes // 125))
    base = with_users(w.snapshot, a.users)
    forms = {
        "no node checks": base,
        "every node has every user": replace(base, accounts=accounts(base, a.users, False)),
        "1 user in 10 missing on 1 node in 10": replace(
            base, accounts=accounts(base, a.users, True)
        ),
    }
    rows: list[dict[str, Any]] = []
    for name, snap in forms.items():
        cpu, started = cpu_cycle(snap, a.repeats)
        rows.append({"form": name, "cpu_s": cpu, "started": started})
    for r in rows:
        r["ratio"] = r["cpu_s"] / rows[0]["cpu_s"]
    if a.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"{a.nodes} nodes, {a.jobs} jobs + {a.gangs} gangs, {a.users} users")
    for r in rows:
        print(f"{r['form']:40s} {1000 * r['cpu_s']:8.1f} ms CPU  {r['ratio']:.2f}x  "
              f"{r['started']} started")  # fmt: skip


if __name__ == "__main__":
    main()
