"""``gpufleet doctor node NODE``: the seeds' troubleshooting rows for one node — GPU not
recognized (driver module, device nodes and their permissions, NVML's error), slow
communication (bandwidth and latency against the expectation, MTU, route), a storage
bottleneck, a clock out of sync — from the API (``node_api``), and from the node probe run as a
job on it (or, with ``--local`` on the node itself, run in this process; ``node_probe``) and a
network probe over it and its idle peers (``node_network``). The analysers are pure functions of
the probe's result, so a test feeds them sample results; this module runs the probes."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from gpufleet.api.schemas import NodeOut
from gpufleet.client import Client
from gpufleet.ops.doctor.finding import Finding, Severity
from gpufleet.ops.doctor.node_api import LOCAL_HINT, api_findings, health_cause
from gpufleet.ops.doctor.node_network import network_findings
from gpufleet.ops.doctor.node_probe import (
    clock_findings,
    gpu_findings,
    nvml_cause,
    storage_findings,
)
from gpufleet.ops.probes import bundle
from gpufleet.ops.validate.common import section
from gpufleet.ops.validate.jobs import Prober
from gpufleet.ops.validate.settings import Settings

E, W, INFO = Severity.ERROR, Severity.WARNING, Severity.INFO

PROBE_ARGS = [
    "--sections",
    "gpu,system,clock,storage",
    "--storage-mb",
    "64",
    "--storage-seconds",
    "2",
]


def local_probe(controller_url: str) -> dict[str, Any]:
    """The node probe in this process (``--local``): for a node that jobs cannot reach."""
    from gpufleet.ops.probes import node as probe_node

    args = probe_node.parser().parse_args([*PROBE_ARGS, "--controller", controller_url])
    return probe_node.probe(args)


def probe_findings(res: dict[str, Any], n: NodeOut, s: Settings) -> list[Finding]:
    registered = len(n.gpu_info) if n.gpu_info else n.gpus
    t = n.name
    return (
        gpu_findings(section(res, "gpu"), registered, t)
        + clock_findings(res, s.max_skew_ms, t)
        + storage_findings(section(res, "storage"), s, t)
    )


def diagnose(
    client: Client,
    name: str,
    s: Settings,
    *,
    local: bool = False,
    log: Callable[[str], None] = lambda _: None,
) -> list[Finding]:
    nodes = client.nodes()
    n = next((x for x in nodes if x.name == name), None)
    if n is None:
        return [
            Finding(
                "node",
                f"no node {name}",
                "it never registered (or the name is wrong)",
                "gpufleet nodes lists them",
                E,
                name,
                "unknown_node",
            )
        ]
    health = client.health().get("time")
    now = float(health) if isinstance(health, int | float) else time.time()
    out = api_findings(n, nodes, now, s.max_heartbeat_age_s)
    url = s.probe_controller or str(client.http.base_url)
    if local:
        return out + probe_findings(local_probe(url), n, s)
    if n.state != "idle" or not n.gpus:
        why = f"it is {n.state}" if n.gpus else "it has no GPUs"
        out.append(
            Finding(
                "probe",
                f"not run: {why}",
                "a probe job needs the whole node idle",
                LOCAL_HINT.format(n=name),
                INFO,
                name,
                "no_probe",
            )
        )
        return out
    peers = [x for x in nodes if x.state == "idle" and x.gpus == n.gpus]
    p = Prober(
        client,
        queue=s.queue,
        priority=s.priority,
        start_timeout_s=s.start_timeout_s,
        run_timeout_s=s.run_timeout_s,
        log=log,
    )
    return out + _probe_node(p, n, s, url, len(peers)) + _probe_network(p, n, s, len(peers))


def _probe_node(p: Prober, n: NodeOut, s: Settings, url: str, workers: int) -> list[Finding]:
    """The node probe as a job over the node and its idle peers; this node's findings."""
    cmd = bundle.command(s.python, "node", [*PROBE_ARGS, "--controller", url])
    specs = [("doctor-node", p.spec("doctor-node", cmd, workers=workers, gpus=n.gpus))]
    node_run = p.run_many(specs)[0]
    res = node_run.results().get(n.name)
    if res is not None:
        return probe_findings(res, n, s)
    return [
        Finding(
            "probe",
            node_run.problem(n.name),
            "the probe job did not report from this node",
            LOCAL_HINT.format(n=n.name),
            W,
            n.name,
            "probe_failed",
        )
    ]


def _probe_network(p: Prober, n: NodeOut, s: Settings, workers: int) -> list[Finding]:
    """A ring of network probes over the node and its idle peers (two nodes at least)."""
    name = n.name
    if workers < 2:
        return [
            Finding(
                "network",
                "not measured: no other idle node of the same size",
                "",
                "gpufleet validate --layers network when two nodes are idle",
                INFO,
                name,
                "no_peer",
            )
        ]
    net_args = ["--mode", "ring", "--mb", str(min(s.net_mb, 128)), "--seconds", "1"]
    cmd = bundle.command(s.python, "net", net_args)
    net = p.run("doctor-net", p.spec("doctor-net", cmd, workers=workers, gpus=n.gpus))
    return network_findings(net, name, s) or [
        Finding(
            "network",
            net.problem(name),
            "the network probe failed",
            "gpufleet validate --layers network",
            W,
            name,
            "net_failed",
        )
    ]


__all__ = [
    "api_findings",
    "clock_findings",
    "diagnose",
    "gpu_findings",
    "health_cause",
    "local_probe",
    "network_findings",
    "nvml_cause",
    "probe_findings",
    "storage_findings",
]
