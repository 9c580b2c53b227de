"""The heal loop's time from an XID to the node back in service (issue 26, ADR 0042). Real
processes: ``LocalCluster`` (a controller with a heal policy, two agents with simulated 8-GPU
nodes, heartbeat 1 s); each trial writes ``xid79@gpu0`` into node-0's fault inbox and waits
for the node's ``resumed`` event (the loop's own: "passed its burn-in"), then for the node to
be idle in ``GET /nodes``. Every figure is a difference of wall-clock times on this one host:
the inject's, and the controller's node events (its clock is the wall clock).

Per trial: drained (the XID's heartbeat), remediating (the order), burning in (the reset's
answer), healed (the burn-in's answer) and resumed, each counted from the XID; and where the
time goes: detection, remediation (the reset, its report), the burn-in (``burn_in_s`` of
stress, with validate's device layer and the network test against node-1 beside it).

    PYTHONPATH=src:. .venv/bin/python bench/heal_loop.py [--trials 7] [--burn-in-s 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from gpufleet.ops.localcluster import LocalCluster, wait_until
from gpufleet.server.store import Store

STEPS = ("drained", "remediating", "burning in", "healed", "resumed")


def inject(agent_dir: Path, fault: str) -> float:
    tmp = agent_dir / ".inject.tmp"
    tmp.write_text(fault + "\n")
    at = time.time()
    tmp.rename(agent_dir / "inject")
    return at


def trial(c: LocalCluster, store: Store, n: int) -> dict[str, float]:
    seen = len(store.node_events("node-0", limit=None))
    t0 = inject(c.data_dir / "node-0", "xid79@gpu0")

    def resumed() -> bool:
        return any(e.what == "resumed" for e in store.node_events("node-0", limit=None)[seen:])

    wait_until(f"trial {n}: node-0 back", resumed, 180)
    with c.admin() as a:
        wait_until(
            f"trial {n}: node-0 idle",
            lambda: next(x for x in a.nodes() if x.name == "node-0").state == "idle",
            60,
        )
    out: dict[str, float] = {}
    for e in store.node_events("node-0", limit=None)[seen:]:
        if e.what in STEPS and e.what not in out:
            out[e.what] = e.time - t0
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--trials", type=int, default=7)
    p.add_argument("--burn-in-s", type=float, default=5.0)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as d:
        policy = Path(d) / "heal.yaml"
        policy.write_text(
            f"heal:\n  burn_in_s: {args.burn_in_s:g}\n  max_failures: 1000\n"
            "  network_min_gbps: 0.05\n  network_max_rtt_ms: 100\n"
        )
        c = LocalCluster(
            Path(d) / "cluster", agents=2, controller_args=["--heal-policy", str(policy)]
        )
        try:
            c.start()
            c.wait_nodes(2)
            store = Store.open(f"sqlite:///{c.data_dir / 'controller' / 'gpufleet.db'}")
            rows = []
            for n in range(1, args.trials + 1):
                r = trial(c, store, n)
                rows.append(r)
                print(f"trial {n}: " + ", ".join(f"{k} {v:.2f} s" for k, v in r.items()))
            store.close()
        finally:
            c.stop()
    print(f"\n{args.trials} trials, burn_in_s {args.burn_in_s:g}, heartbeat 1 s; median (min–max):")
    for step in STEPS:
        xs = [r[step] for r in rows if step in r]
        print(f"  XID → {step:12s} {statistics.median(xs):6.2f} s ({min(xs):.2f}–{max(xs):.2f})")
    parts = {
        "detection (XID → drained)": [r["drained"] for r in rows],
        "remediation (order → reset answered)": [r["burning in"] - r["remediating"] for r in rows],
        "burn-in (ordered → passed)": [r["healed"] - r["burning in"] for r in rows],
    }
    for name, xs in parts.items():
        print(f"  {name:38s} {statistics.median(xs):6.2f} s")


if __name__ == "__main__":
    main()
