"""The autoscaler of services: how many replicas a history of request rates asks for.

A pure function of the samples and the policy (the ServiceMaster feeds it ``ServiceLoad``
events and acts on the answer)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from gpufleet.model.service import Autoscale


def wanted(qps: float, policy: Autoscale) -> int:
    """The count one measured rate asks for: ceil(rate / target), within min and max; any
    request at all asks for one (a rate too small to count after the float tolerance once
    scaled a service up from zero and, within the down delay, back to zero: a flap)."""
    n = max(1, math.ceil(qps / policy.target_qps_per_replica - 1e-9)) if qps > 0 else 0
    return max(policy.min, min(policy.max, n))


def _held(samples: Sequence[tuple[float, float]], since: float) -> list[float] | None:
    """The rates in effect from ``since`` on (the sample in effect then and every later one);
    None when the history does not reach back that far."""
    start = None
    for i, (t, _) in enumerate(samples):
        if t <= since:
            start = i
        else:
            break
    return None if start is None else [q for _, q in samples[start:]]


def desired_replicas(
    samples: Sequence[tuple[float, float]], current: int, policy: Autoscale, now: float
) -> int:
    """How many replicas, given the rate samples ``(time, qps)`` (in time order) up to ``now``.

    Up to the least count the rate asked for throughout the last ``upscale_delay_s`` when that
    is above ``current``; down to the most it asked for throughout the last
    ``downscale_delay_s`` when that is below (so a change holds for at least the other delay:
    no flapping); always within [min, max]; from zero at once at the first request (as SkyServe:
    a service with no replica has nothing to wait for). Without enough history, no change."""
    if not policy.min <= current <= policy.max:
        return max(policy.min, min(policy.max, current))
    seen = [s for s in samples if s[0] <= now]
    if not seen:
        return current
    if current == 0 and seen[-1][1] > 0:
        return max(1, wanted(seen[-1][1], policy))
    up = _held(seen, now - policy.upscale_delay_s)
    if up is not None:
        n = min(wanted(q, policy) for q in up)
        if n > current:
            return n
    down = _held(seen, now - policy.downscale_delay_s)
    if down is not None:
        n = max(wanted(q, policy) for q in down)
        if n < current:
            return n
    return current
