"""The node agent: GPU backends (NVML, simulated), health checks, the task runner, and the
agent that registers, heartbeats, long-polls for launches and reports task events.

The names below are imported when first used, not with the package: importing the pure state
machine (``gpufleet.agent.state``) or the task types (``agent/tasks.py``) then loads no runner,
HTTP client or GPU library, as ``.importlinter`` already requires of their own imports."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpufleet.agent.agent import Agent
    from gpufleet.agent.config import AgentConfig
    from gpufleet.agent.gpu import DCGM_FIELDS, GpuBackend, GpuSample, GpuUnavailable
    from gpufleet.agent.main import run_agent
    from gpufleet.agent.nvml import NvmlBackend
    from gpufleet.agent.runner import TaskRunner
    from gpufleet.agent.simgpu import SimulatedGpus
    from gpufleet.agent.state import AgentState

_HOMES = {
    "Agent": "gpufleet.agent.agent",
    "AgentConfig": "gpufleet.agent.config",
    "AgentState": "gpufleet.agent.state",
    "DCGM_FIELDS": "gpufleet.agent.gpu",
    "GpuBackend": "gpufleet.agent.gpu",
    "GpuSample": "gpufleet.agent.gpu",
    "GpuUnavailable": "gpufleet.agent.gpu",
    "NvmlBackend": "gpufleet.agent.nvml",
    "SimulatedGpus": "gpufleet.agent.simgpu",
    "TaskRunner": "gpufleet.agent.runner",
    "run_agent": "gpufleet.agent.main",
}

__all__ = [
    "DCGM_FIELDS",
    "Agent",
    "AgentConfig",
    "AgentState",
    "GpuBackend",
    "GpuSample",
    "GpuUnavailable",
    "NvmlBackend",
    "SimulatedGpus",
    "TaskRunner",
    "run_agent",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
