"""Layer 2, network: a whole-node gang measures bandwidth and round-trip time on each link (a
ring, or every ordered pair) with iperf3 where every node has it, else a built-in TCP test;
NCCL all-reduce bus bandwidth where PyTorch, CUDA and NCCL are on every node. Each link is held
to ``nic_fraction`` of the sending NIC's nominal speed when the NIC is physical (its speed is
known), else to ``min_net_gbps``."""

from __future__ import annotations

from collections import Counter
from typing import Any

from gpufleet.ops.validate.checks import Check, failed, skipped, verdict, warned
from gpufleet.ops.validate.common import section
from gpufleet.ops.validate.context import Context
from gpufleet.ops.validate.jobs import ProbeRun
from gpufleet.ops.validate.settings import Settings

LAYER = "network"


def nic_of(rank_result: dict[str, Any], dev: str | None) -> dict[str, Any]:
    return next((i for i in rank_result.get("interfaces", []) if i.get("name") == dev), {})


def expected_gbps(s: Settings, nic: dict[str, Any]) -> tuple[float, str]:
    speed = nic.get("speed_mbps")
    if nic.get("physical") and speed:
        nominal = speed / 1000
        return s.nic_fraction * nominal, f"{s.nic_fraction:.0%} of {nominal:g} Gb/s ({nic['name']})"
    return s.min_net_gbps, f"configured minimum (NIC speed unknown: {nic.get('name') or '?'})"


def link_checks(ctx: Context, run: ProbeRun) -> list[Check]:
    s = ctx.settings
    out: list[Check] = []
    node_of = {r.rank: r.node for r in run.ranks}
    mtus: dict[str, int] = {}
    for r in run.ranks:
        res = r.result
        if res is None:
            out.append(failed(LAYER, "links", r.node, "no result", "a result", run.problem(r.node)))
            continue
        if res.get("error") and not res.get("links"):
            out.append(failed(LAYER, "links", r.node, "failed", "measured", res["error"]))
            continue
        for link in res.get("links", []):
            dst = node_of.get(link.get("dst"), f"rank {link.get('dst')}")
            target = f"{r.node} → {dst}"
            dev = section(link, "route").get("dev")
            nic = nic_of(res, dev)
            if nic.get("mtu"):
                mtus[r.node] = nic["mtu"]
            if link.get("error") or link.get("gbps") is None:
                why = link.get("error") or link.get("receive_error") or "no measurement"
                out.append(
                    failed(
                        LAYER,
                        "bandwidth",
                        target,
                        "failed",
                        "measured",
                        f"{why}: a firewall, a wrong route or an unreachable address "
                        f"({link.get('dst_addr')})? run 'gpufleet doctor node {r.node}'",
                    )
                )
                continue
            want, why = expected_gbps(s, nic)
            gbps = float(link["gbps"])
            out.append(
                verdict(
                    gbps >= want,
                    LAYER,
                    "bandwidth",
                    target,
                    f"{gbps:.2f} Gb/s ({link.get('tool')})",
                    f"≥ {want:.2f} Gb/s, {why}",
                    f"the link is slow: check the NIC's negotiated speed (ethtool {dev}), errors "
                    "and drops (ip -s link), MTU, the route, and traffic shaping (tc qdisc)",
                )
            )
            rtt = float(link.get("rtt_ms", 0.0))
            out.append(
                verdict(
                    rtt <= s.max_rtt_ms,
                    LAYER,
                    "latency",
                    target,
                    f"{rtt:.3f} ms RTT",
                    f"≤ {s.max_rtt_ms:g} ms",
                    "high round trip: congestion, a long route (traceroute), an overloaded "
                    "host, or delay added on the path (tc qdisc)",
                )
            )
    if len(set(mtus.values())) > 1:
        common_mtu, _ = Counter(mtus.values()).most_common(1)[0]
        odd = sorted(n for n, m in mtus.items() if m != common_mtu)
        out.append(
            warned(
                LAYER,
                "mtu",
                ", ".join(odd),
                ", ".join(f"{n}: {mtus[n]}" for n in odd),
                f"{common_mtu} like the others",
                "mismatched MTUs fragment or drop large frames: set one MTU on the fabric",
            )
        )
    return out


def nccl_checks(ctx: Context) -> list[Check]:
    s = ctx.settings
    if "device" in ctx.layers or "application" in ctx.layers:
        results = ctx.node_probe().results()
        no = {
            n: section(res, "gpu", "torch").get("why") or "PyTorch not installed"
            for n, res in results.items()
            if not (
                section(res, "gpu", "torch").get("cuda")
                and section(res, "gpu", "torch").get("nccl")
            )
        }
        if no or not results:
            why = (
                "; ".join(sorted({f"{w} ({n})" for n, w in no.items()})) or "no node probe results"
            )
            return [
                skipped(
                    LAYER,
                    "nccl all-reduce",
                    "cluster",
                    f"needs PyTorch with CUDA and NCCL on every node: {why}",
                )
            ]
    args = ["--timeout", str(min(s.run_timeout_s, 300))]
    runs = ctx.whole_node_runs("nccl", "nccl", args)
    out: list[Check] = []
    for run in runs:
        first = next((r.result for r in run.ranks if r.rank == 0 and r.result), None)
        if first is None:
            out.append(
                failed(LAYER, "nccl all-reduce", "cluster", "no result", "a result", run.problem())
            )
            continue
        if first.get("skipped"):
            out.append(skipped(LAYER, "nccl all-reduce", "cluster", first["skipped"]))
            continue
        errors = [r.result.get("error") for r in run.ranks if r.result and r.result.get("error")]
        if errors or not first.get("results"):
            out.append(
                failed(
                    LAYER,
                    "nccl all-reduce",
                    "cluster",
                    "failed",
                    "completes",
                    "; ".join(e for e in errors if e)[:500],
                )
            )
            continue
        best = max(first["results"], key=lambda x: x["busbw_gbs"])
        nodes = ", ".join(r.node for r in run.ranks)
        out.append(
            verdict(
                best["busbw_gbs"] >= s.min_busbw_gbs,
                LAYER,
                "nccl all-reduce",
                nodes,
                f"{best['busbw_gbs']:.1f} GB/s bus bandwidth at {best['size_mb']} MiB "
                f"({first.get('ranks')} ranks)",
                f"≥ {s.min_busbw_gbs:g} GB/s",
                "slow all-reduce: NCCL_DEBUG=INFO shows the transport (IB or sockets?); check "
                "GPUDirect RDMA (nvidia_peermem), NCCL_IB_HCA and the rail wiring",
            )
        )
    return out


def checks(ctx: Context) -> list[Check]:
    s = ctx.settings
    targets = ctx.targets()
    if len(targets) < 2:
        return [
            skipped(LAYER, "links", "cluster", f"needs two idle nodes; {len(targets)} available")
        ]
    args = ["--mode", s.net_mode, "--mb", str(s.net_mb), "--seconds", str(s.net_seconds)]
    args += ["--timeout", str(min(s.run_timeout_s, 120 + s.net_seconds * len(targets) * 4))]
    runs = ctx.whole_node_runs("net", "net", args)
    out: list[Check] = []
    for run in runs:
        if len(run.ranks) >= 2 or run.error:
            out += link_checks(ctx, run)
    if len(runs) > 1:
        out.append(
            warned(
                LAYER,
                "links",
                "cluster",
                f"{len(runs)} groups",
                "one group",
                "nodes with different GPU counts were tested in separate gangs: links between "
                "the groups were not measured",
            )
        )
    return out + nccl_checks(ctx)
