"""The REST API's wire schema for fairness against entitlement: ``/accounting/fairness``
(server/routers/admin.py; the figure is ``scheduler/entitlement.py``'s)."""

from __future__ import annotations

from gpufleet.api.schemas import Strict


class EntitlementOut(Strict):
    """How close each queue's share of GPU-time came to its entitlement over a period
    (``scheduler/entitlement.py``): Jain's index over received ÷ entitled GPU-time per hour,
    averaged over the hours in which two or more queues wanted GPUs; per queue, received ÷
    entitled over those hours."""

    jain: float | None
    windows: int
    window_s: float
    queues: dict[str, float]
