"""Layer 7, monitoring: every node's metrics are fresh. From GET /nodes, the last heartbeat
(heartbeats carry the metrics) is younger than ``max_heartbeat_age_s`` by the controller's own
clock; from ``/metrics``, every node is exported, with one GPU series per registered GPU."""

from __future__ import annotations

from gpufleet.api.schemas import NodeOut
from gpufleet.ops.validate.checks import Check, failed, verdict, warned
from gpufleet.ops.validate.common import parse_prometheus
from gpufleet.ops.validate.context import Context

LAYER = "monitoring"
GPU_SERIES = "DCGM_FI_DEV_GPU_TEMP"


def heartbeat_checks(ctx: Context, nodes: list[NodeOut]) -> list[Check]:
    limit = ctx.settings.max_heartbeat_age_s
    now = ctx.controller_time()
    out = []
    for n in nodes:
        if n.last_heartbeat is None:
            out.append(
                failed(
                    LAYER,
                    "heartbeat age",
                    n.name,
                    "never",
                    f"≤ {limit:g} s",
                    "no heartbeat since the controller started",
                )
            )
            continue
        age = now - n.last_heartbeat
        out.append(
            verdict(
                age <= limit and n.state != "lost",
                LAYER,
                "heartbeat age",
                n.name,
                f"{age:.1f} s",
                f"≤ {limit:g} s",
                "its agent is not reporting: is it running (systemctl status gpufleet-agent), "
                "can it reach the controller, is its token valid?",
            )
        )
    return out


def exporter_checks(ctx: Context, nodes: list[NodeOut]) -> list[Check]:
    text = ctx.metrics()
    if text is None:
        return [
            warned(
                LAYER,
                "/metrics",
                "controller",
                "unavailable",
                "exported",
                ctx.metrics_error
                if "needs a metrics" in ctx.metrics_error
                else f"{ctx.metrics_error}: Prometheus cannot scrape the controller",
            )
        ]
    try:
        samples = parse_prometheus(text)
    except ValueError as e:
        return [warned(LAYER, "/metrics", "controller", "unparsable", "exported", str(e))]
    ages = {
        lb.get("Hostname"): v
        for name, lb, v in samples
        if name == "gpufleet_node_heartbeat_age_seconds"
    }
    gpus: dict[str, set[str]] = {}
    for name, lb, _ in samples:
        if name == GPU_SERIES:
            gpus.setdefault(lb.get("Hostname", ""), set()).add(lb.get("gpu", ""))
    out = []
    for n in nodes:
        if n.state == "lost":
            continue
        want = len(n.gpu_info) if n.gpu_info else n.gpus
        seen = len(gpus.get(n.name, ()))
        in_export = n.name in ages or n.name in gpus
        out.append(
            verdict(
                in_export and seen >= want,
                LAYER,
                "/metrics",
                n.name,
                f"{'exported' if in_export else 'absent'}, {seen} GPU series ({GPU_SERIES})",
                f"exported, {want} GPU series",
                "the controller has no fresh GPU metrics for this node: its heartbeats carry "
                "none (GPU backend failing on the node?)",
            )
        )
    return out


def checks(ctx: Context) -> list[Check]:
    nodes = sorted(ctx.client.nodes(), key=lambda n: n.name)  # now, not as the run began
    return heartbeat_checks(ctx, nodes) + exporter_checks(ctx, nodes)
