"""A queue's idle-GPU policy as GET /queues shows it (model/idle.py; times in seconds)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class IdlePolicyOut(BaseModel):
    model_config = ConfigDict(extra="forbid")

    threshold_pct: float
    warn_after_s: list[float]
    act_after_s: float
    action: str
    window_s: float
    exempt: bool
    exempt_max_s: float
    charge_idle: float = 0.0
