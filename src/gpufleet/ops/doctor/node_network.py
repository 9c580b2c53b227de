"""``gpufleet doctor node``'s analysis of a network probe run: each link from or to the node,
its bandwidth and round trip against what its NIC should carry, and what on the path (MTUs that
differ, a gateway, a virtual interface) may explain a slow one."""

from __future__ import annotations

from typing import Any

from gpufleet.ops.doctor.finding import Finding, Severity, ok
from gpufleet.ops.validate.common import section
from gpufleet.ops.validate.jobs import ProbeRun
from gpufleet.ops.validate.network import expected_gbps, nic_of
from gpufleet.ops.validate.settings import Settings

E = Severity.ERROR


def network_findings(run: ProbeRun, node: str, s: Settings) -> list[Finding]:
    """Links from and to ``node`` in a network probe run."""
    node_of = {r.rank: r.node for r in run.ranks}
    results = {r.node: r.result or {} for r in run.ranks}
    out: list[Finding] = []
    for r in run.ranks:
        for link in (r.result or {}).get("links", []):
            dst = node_of.get(link.get("dst"), "?")
            if node in (r.node, dst):
                peer: dict[str, Any] = results.get(dst) or {}
                out.append(_link_finding(r.result or {}, link, f"{r.node} → {dst}", dst, peer, s))
    return out


def _link_finding(
    result: dict[str, Any],
    link: dict[str, Any],
    t: str,
    dst: str,
    peer: dict[str, Any],
    s: Settings,
) -> Finding:
    """One measured link (from the rank whose probe ``result`` holds it to ``dst``)."""
    if link.get("gbps") is None:
        return Finding(
            "link",
            link.get("error") or link.get("receive_error", "failed"),
            "the peer is unreachable: a firewall, a wrong route or a down interface",
            f"ip route get {link.get('dst_addr')}; check firewalls between the nodes",
            E,
            t,
            "link_down",
        )
    route = section(link, "route")
    nic = nic_of(result, route.get("dev"))
    peer_nic: dict[str, Any] = next(iter(peer.get("interfaces", [])), {})
    want, why = expected_gbps(s, nic)
    dev = route.get("dev", "DEV")
    gbps, rtt = float(link["gbps"]), float(link.get("rtt_ms", 0))
    facts = [
        f"{gbps:.2f} Gb/s, {rtt:.3f} ms RTT",
        f"route: {route.get('ip_route', '?')}",
        f"MTU {nic.get('mtu')} here",
    ]
    if peer_nic.get("mtu"):
        facts.append(f"{peer_nic.get('mtu')} at {dst}")
    causes = _path_causes(route, nic, peer_nic)
    if gbps < want:
        cause = (
            "; ".join(causes)
            or "the link runs below its speed: a bad cable or optic, a wrong negotiated "
            "speed, congestion, or traffic shaping"
        )
        return Finding(
            "bandwidth",
            "; ".join(facts) + f"; expected ≥ {want:.2f} Gb/s ({why})",
            cause,
            f"ethtool {dev} (speed, errors), ip -s link (drops), tc qdisc show dev "
            f"{dev}, the switch port's counters; one MTU end to end",
            E,
            t,
            "slow_link",
        )
    if rtt > s.max_rtt_ms:
        return Finding(
            "latency",
            "; ".join(facts) + f"; expected ≤ {s.max_rtt_ms:g} ms",
            "; ".join(causes) or "a long or congested path, or delay added on it",
            "traceroute to the peer; check the switch queues and tc qdisc",
            E,
            t,
            "high_latency",
        )
    return ok("link", "; ".join(facts[:2]), t, "link")


def _path_causes(route: dict[str, Any], nic: dict[str, Any], peer_nic: dict[str, Any]) -> list[str]:
    """What on the path may slow a link down."""
    causes = []
    if nic.get("mtu") and peer_nic.get("mtu") and nic["mtu"] != peer_nic["mtu"]:
        causes.append("the MTUs differ (fragmentation, or large frames dropped)")
    if route.get("via"):
        causes.append(
            f"traffic goes through the gateway {route['via']}, not straight over the fabric"
        )
    if nic and not nic.get("physical"):
        causes.append(f"{nic.get('name')} is a virtual interface (bridge, veth, tunnel)")
    return causes
