"""The node series: each node's state, health, drain, heartbeat age, GPUs and versions; the
node events counted since the start; and the host figures of each agent's heartbeat."""

from __future__ import annotations

from collections.abc import Mapping

from gpufleet.core.controller import Controller
from gpufleet.model.resources import MILLI
from gpufleet.server.metrics.catalog import HOST_METRICS, NODE_STATES
from gpufleet.server.metrics.text import Family, LabelOf, Labels, value
from gpufleet.server.service.links import NodeLink


def host_families(ctrl: Controller, links: Mapping[str, NodeLink], lab: LabelOf) -> list[Family]:
    fams = {key: Family(n, kind, h) for key, (n, kind, h) in HOST_METRICS.items()}
    for name in sorted(ctrl.nodes):
        node = ctrl.nodes[name]
        link = links.get(name)
        if node.lost or link is None or not isinstance(link.metrics, dict):
            continue
        host = link.metrics.get("host")
        if not isinstance(host, dict):
            continue
        lb = lab((("Hostname", name),))
        for key, raw in host.items():
            fam = fams.get(key)
            v = value(raw)
            if fam is not None and v is not None:
                fam.add(lb, v)
    return list(fams.values())


def node_families(
    ctrl: Controller,
    links: Mapping[str, NodeLink],
    lab: LabelOf,
    now: float,
    events_seen: Mapping[tuple[str, str], int],
) -> list[Family]:
    """``events_seen``: (node, event) → how many since the start (the collector counts)."""
    state = Family(
        "gpufleet_node_state", "gauge", "1 for the node's state: " + ", ".join(NODE_STATES) + "."
    )
    up = Family("gpufleet_node_up", "gauge", "1 unless the node is lost (its heartbeats stopped).")
    healthy = Family("gpufleet_node_healthy", "gauge", "1 while the node passes its health checks.")
    drained = Family(
        "gpufleet_node_drained",
        "gauge",
        "1 while the node is drained (by an admin or by the controller).",
    )
    hdrained = Family(
        "gpufleet_node_health_drained",
        "gauge",
        "1 while the node is drained by the controller for a failed health check; it "
        "returns to service by itself once it passes them again.",
    )
    age = Family(
        "gpufleet_node_heartbeat_age_seconds",
        "gauge",
        "Seconds since the node's agent was last heard from.",
    )
    gpus = Family("gpufleet_node_gpus", "gauge", "GPUs on the node.")
    free = Family("gpufleet_node_gpus_free", "gauge", "GPUs free on the node (fractions add up).")
    info = Family(
        "gpufleet_node_info",
        "gauge",
        "1 per node, with the driver and CUDA versions its agent registered with.",
    )
    counts = dict.fromkeys(NODE_STATES, 0)
    for name in sorted(ctrl.nodes):
        n = ctrl.nodes[name]
        lb = lab((("node", name),))
        st = n.state
        counts[st] = counts.get(st, 0) + 1
        for s in NODE_STATES:
            state.add(lab((("node", name), ("state", s))), int(s == st))
        up.add(lb, int(not n.lost))
        healthy.add(lb, int(n.healthy))
        drained.add(lb, int(n.drained))
        hdrained.add(lb, int(n.health_drained))
        link = links.get(name)
        if link is not None:
            age.add(lb, max(0.0, now - link.last_seen))
            versions = (
                ("driver_version", link.driver_version),
                ("cuda_version", link.cuda_version),
            )
            info.add(lab((("node", name), *versions)), 1)
        gpus.add(lb, n.spec.gpus)
        free.add(lb, 0 if n.lost else sum(n.gpu_free) / MILLI)
    nodes = Family("gpufleet_nodes", "gauge", "Nodes in each state.")
    for s, c in counts.items():
        nodes.add(Labels((("state", s),)), c)
    return [
        nodes,
        state,
        up,
        healthy,
        drained,
        hdrained,
        age,
        gpus,
        free,
        info,
        _events(events_seen),
        *_heal(ctrl, lab, now),
    ]


def _heal(ctrl: Controller, lab: LabelOf, now: float) -> list[Family]:
    """The heal loop's (ADR 0042), with a heal policy: each node's failures in its window, and
    whether the loop gave it up (suspected hardware: an RMA to file)."""
    book = ctrl.healer.book
    if book is None:
        return []
    failures = Family(
        "gpufleet_node_heal_failures",
        "gauge",
        "The node's heal-loop failures (faults, failed remediations and burn-ins) within the "
        "policy's window; at its max_failures the node is given up.",
    )
    given_up = Family(
        "gpufleet_node_heal_given_up",
        "gauge",
        "1 while the heal loop has given the node up as suspected hardware (drained until an "
        "admin resumes it).",
    )
    since = now - book.policy.window_s
    for name in sorted(ctrl.nodes):
        lb = lab((("node", name),))
        failures.add(lb, sum(1 for t, _ in book.failures(name) if t > since))
        given_up.add(lb, int(book.phase(name) == "rma"))
    return [failures, given_up]


def _events(seen: Mapping[tuple[str, str], int]) -> Family:
    events = Family(
        "gpufleet_node_events_total",
        "counter",
        "Node events since the controller started: lost, drained, resumed, unhealthy, healthy.",
    )
    for (node, what), c in sorted(seen.items()):
        events.add(Labels((("node", node), ("event", what))), c)
    return events
