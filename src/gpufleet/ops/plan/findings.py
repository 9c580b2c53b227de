"""A warning of the planner: what is wrong with the plan, why it matters, and where."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PlanWarning:
    code: str  # stable, for scripts: "host-memory", "pcie-lanes", "three-tier", …
    where: str  # a pool name, "fabric", "storage" or "racks"
    message: str  # what the plan shows
    reason: str  # the rule it breaks, and why that rule exists
