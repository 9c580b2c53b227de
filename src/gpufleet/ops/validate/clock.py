"""Layer 4, clocks: each node's offset from the controller's clock, under ``max_skew_ms``.

The probe reads its clock, the controller's (``/healthz`` ``time``) and its clock again; the
offset is the midpoint's difference and its uncertainty half the round trip, so a node FAILs
only when even the most favourable reading is over the threshold. Where the probe cannot reach
the controller, the job's own events bound the offset: the probe started after the controller
committed STARTING and ended before it recorded the end, so
offset ∈ [probe end − end event, probe start − STARTING event]. The kernel's synchronisation
flag (and timedatectl/chrony where present) adds a WARN when no time service disciplines the
clock."""

from __future__ import annotations

from typing import Any

from gpufleet.api.schemas import JobOut
from gpufleet.ops.validate.checks import Check, failed, skipped, verdict, warned
from gpufleet.ops.validate.common import section
from gpufleet.ops.validate.context import Context

LAYER = "clock"
FIX = (
    "the node's clock is off: check its time service (chronyc tracking / timedatectl), that "
    "it reaches the same NTP servers as the controller, and that no one set the clock by hand"
)


def event_bounds(job: JobOut | None, res: dict[str, Any]) -> tuple[float, float] | None:
    """(lowest, highest) offset the job's events allow, in seconds."""
    if job is None or not job.events:
        return None
    starting = [e.time for e in job.events if e.state == "STARTING"]
    ends = [
        e.time for e in job.events if e.state in ("SUCCEEDED", "FAILED", "CANCELLED", "TIMED_OUT")
    ]
    if not starting or not ends or "start_time" not in res or "end_time" not in res:
        return None
    return float(res["end_time"]) - ends[-1], float(res["start_time"]) - starting[-1]


def skew(ctx: Context, node: str, res: dict[str, Any], job: JobOut | None) -> Check:
    limit = ctx.settings.max_skew_ms / 1000
    c = section(res, "clock")
    if "offset_s" in c:
        off, err = float(c["offset_s"]), float(c["rtt_s"]) / 2
        return verdict(
            abs(off) - err <= limit,
            LAYER,
            "skew",
            node,
            f"{off * 1000:+.1f} ms ± {err * 1000:.1f} ms",
            f"|skew| ≤ {ctx.settings.max_skew_ms:g} ms (vs the controller)",
            FIX,
        )
    bounds = event_bounds(job, res)
    why = c.get("error", "no clock reading")
    if bounds is None:
        return failed(LAYER, "skew", node, "unknown", "measured", why)
    lo, hi = bounds
    measured = f"{lo * 1000:+.0f} … {hi * 1000:+.0f} ms (from job events; {why})"
    expected = f"|skew| ≤ {ctx.settings.max_skew_ms:g} ms"
    if lo > limit or hi < -limit:
        return failed(LAYER, "skew", node, measured, expected, FIX)
    return warned(
        LAYER,
        "skew",
        node,
        measured,
        expected,
        "only bounded by the job's events: give --probe-controller URL the nodes can reach",
    )


def sync_check(node: str, res: dict[str, Any]) -> Check | None:
    ts = section(res, "system", "time_sync")
    k = section(ts, "kernel")
    if ts.get("ntp_synchronized") is False or k.get("synchronised") is False:
        source = (
            "timedatectl: NTPSynchronized=no"
            if ts.get("ntp_synchronized") is False
            else (f"kernel: not synchronised (max error {k.get('maxerror_us', 0) / 1e6:g} s)")
        )
        return warned(
            LAYER,
            "time service",
            node,
            source,
            "synchronised",
            "no time service disciplines this clock: enable chronyd or systemd-timesyncd "
            "(or PTP) against the same servers as the other nodes",
        )
    if "ntp_synchronized" in ts or "synchronised" in k:
        return verdict(True, LAYER, "time service", node, "synchronised", "synchronised")
    return None


def checks(ctx: Context) -> list[Check]:
    targets = ctx.targets()
    if not targets:
        return [skipped(LAYER, "skew", "cluster", "no idle node to probe")]
    probe = ctx.node_probe()
    results = probe.results()
    out: list[Check] = []
    for n in targets:
        res = results.get(n.name)
        if res is None:
            out.append(
                failed(LAYER, "skew", n.name, "no result", "a result", probe.problem(n.name))
            )
            continue
        rank = probe.by_node().get(n.name)
        out.append(skew(ctx, n.name, res, rank.job if rank else probe.job))
        row = sync_check(n.name, res)
        if row is not None:
            out.append(row)
    return out
