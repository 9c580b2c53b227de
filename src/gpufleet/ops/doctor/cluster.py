"""``gpufleet doctor`` with no target: every node's state from the API, and the jobs that
failed most recently, each diagnosed from its logs. No probe jobs: quick and harmless."""

from __future__ import annotations

import time

from gpufleet.client import Client
from gpufleet.ops.doctor import job as job_doctor
from gpufleet.ops.doctor import node as node_doctor
from gpufleet.ops.doctor.finding import Finding, Severity

FAILED_STATES = ("FAILED", "TIMED_OUT")


def diagnose(client: Client, *, max_heartbeat_age_s: float = 30.0, jobs: int = 5) -> list[Finding]:
    nodes = client.nodes()
    t = client.health().get("time")
    now = float(t) if isinstance(t, int | float) else time.time()
    out: list[Finding] = []
    for n in sorted(nodes, key=lambda x: x.name):
        out += [
            f
            for f in node_doctor.api_findings(n, nodes, now, max_heartbeat_age_s)
            if f.severity is not Severity.OK
        ]
    if not out:
        out.append(
            Finding(
                "nodes", f"{len(nodes)} node(s) in service", "", "", Severity.OK, "cluster", "nodes"
            )
        )
    recent = [j for j in client.jobs(all_states=True, limit=200) if j.state in FAILED_STATES]
    recent.sort(key=lambda j: j.end_time or 0, reverse=True)
    for j in recent[:jobs]:
        out += [f for f in job_doctor.diagnose(client, j.id) if f.severity is Severity.ERROR]
    return out
