"""Scale-up latency of an elastic pool with the ``local`` provider (issue 25): a real controller
and, for each trial, a gang of two 8-GPU workers submitted to a pool whose nodes are all
powered down. Each trial reads the controller's own timestamps (one clock):

- decision: from the job's submission to the pool's ``powering_up`` events (the target: within
  one scheduling cycle of the job becoming unplaceable; the cycle is the pass that follows
  the submission's turn);
- provider start: from ``powering_up`` to the node's ``powered_up`` (its agent registered);
  the provider's own start time (an agent process starting on this machine);
- job start after the last node: from the last ``powered_up`` to the job's start (the target:
  within one cycle, ``--schedule-interval-s``);
- end to end: submission to start.

Between trials the nodes are released (``suspend_after_s`` 2 s) and the next trial waits for
every node powered down.

    PYTHONPATH=src:. .venv/bin/python bench/elastic_scaleup.py [--trials 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from gpufleet.client import Client
from gpufleet.ops.localcluster import LocalCluster, wait_until

CLUSTER = """
name: burst
pools:
  - name: burst
    gpu_model: H100-SXM
    gpus: 8
    cpu_cores: 8
    memory_gib: 32
    elastic: {min: 0, max: 2, provider: local, resume_timeout_s: 120, suspend_after_s: 2}
"""
GANG = {"workers": 2, "gpus_per_worker": 8, "command": ["sleep", "1"], "user": "bench"}


def events(c: Client, node: str) -> dict[str, float]:
    """The node's newest time of each event (``/nodes/NAME/history``)."""
    body = c.call("GET", f"/nodes/{node}/history", params={"events": 20})
    out: dict[str, float] = {}
    for e in body["events"]:
        out[e["what"]] = max(out.get(e["what"], 0.0), e["time"])
    return out


def trial(c: Client, n: int) -> tuple[float, float, float, float]:
    (jid,) = c.submit({**GANG, "name": f"gang-{n}"})
    j = c.job(jid)
    deadline = time.monotonic() + 120
    while not (j.start_time and j.placement):
        if time.monotonic() > deadline:
            raise TimeoutError(f"trial {n}: {jid} not started ({j.state}, {j.reason})")
        time.sleep(0.05)
        j = c.job(jid)
    nodes = sorted({p.node for p in j.placement})
    evs = [events(c, x) for x in nodes]
    asked = min(e["powering_up"] for e in evs)
    registered = [e["powered_up"] for e in evs]
    decision = asked - j.submit_time
    provider = statistics.mean(r - e["powering_up"] for r, e in zip(registered, evs, strict=True))
    after = j.start_time - max(registered)
    return decision, provider, after, j.start_time - j.submit_time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=5)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        spec = Path(d) / "cluster.yaml"
        spec.write_text(CLUSTER)
        c = LocalCluster(Path(d), agents=0, gateway="off", cluster_spec=spec)
        c.start()
        try:
            with c.admin() as admin:
                rows = []
                for n in range(a.trials):

                    def all_down(admin: Client = admin) -> bool:
                        return all(x.state == "powered_down" for x in admin.nodes())

                    wait_until("every node powered down", all_down, 60)
                    rows.append(trial(admin, n))
                    r = rows[-1]
                    print(
                        f"trial {n}: decision {r[0] * 1000:.0f} ms, provider start {r[1]:.2f} s, "
                        f"start after the last node {r[2] * 1000:.0f} ms, end to end {r[3]:.2f} s",
                        flush=True,
                    )
        finally:
            c.stop()
    for i, name in enumerate(("decision", "provider start", "after last node", "end to end")):
        xs = [r[i] for r in rows]
        print(f"{name}: median {statistics.median(xs):.3f} s, worst {max(xs):.3f} s")
    print(f"schedule interval {c.schedule_interval_s:g} s")


if __name__ == "__main__":
    main()
