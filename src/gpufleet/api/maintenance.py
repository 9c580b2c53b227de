"""The REST API's wire schemas for rolling maintenance (``/maintenance``,
server/routers/maintenance.py; the state machine is core/rollout.py)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from gpufleet.api.bounds import Line, Name
from gpufleet.api.schemas import Input, Strict

# gpufleet validate's layers that run on a node by themselves (ops/validate/onnode.py)
NODE_LAYERS = ("device", "network", "storage")
MAX_COMMAND = 16 * 1024


class MaintenanceCreate(Input):
    nodes: Annotated[Line, Field(min_length=1)]  # a hostlist (node-[0-15]) or "all"
    batch: Annotated[str, Field(min_length=1, max_length=16)] = "10%"  # "10%" or a count
    run: Annotated[str, Field(max_length=MAX_COMMAND)] = ""
    rollback: Annotated[str, Field(max_length=MAX_COMMAND)] = ""
    validate_layers: Annotated[list[Name], Field(default_factory=list, max_length=8)]
    max_failures: Annotated[int, Field(ge=0, le=100_000)] = 0
    deadline_s: Annotated[float, Field(gt=0, le=30 * 86400)] | None = None
    canary: Annotated[int, Field(ge=0, le=100_000)] = 0
    soak_s: Annotated[float, Field(ge=0, le=30 * 86400)] | None = None
    window: Name | None = None  # a reservation's name: batches start only while it is open
    agent_upgrade: bool = False
    python: Annotated[str, Field(max_length=4096)] = ""  # the agent upgrade's new interpreter
    timeout_s: Annotated[float, Field(gt=0, le=7 * 86400)] = 3600.0


class MaintenanceNode(Strict):
    node: str
    batch: int  # 1-based
    phase: str
    why: str = ""


class MaintenanceOut(Strict):
    id: str
    state: str
    why: str
    created_by: str
    what: str  # "run 'CMD'" or "agent upgrade"
    started: float
    ended: float | None
    batch: int  # the batch under way, 1-based (0: none yet)
    batches: int
    canary: int
    soak_until: float | None
    window: str
    failures: int
    max_failures: int
    nodes: list[MaintenanceNode]
