"""The node agent: GPU backends (NVML, simulated), health checks, the task runner, and the
agent that registers, heartbeats, long-polls for launches and reports task events."""

from gpufleet.agent.agent import Agent, AgentConfig
from gpufleet.agent.gpu import DCGM_FIELDS, GpuBackend, GpuSample, GpuUnavailable
from gpufleet.agent.main import run_agent
from gpufleet.agent.nvml import NvmlBackend
from gpufleet.agent.runner import TaskRunner
from gpufleet.agent.simgpu import SimulatedGpus
from gpufleet.agent.state import AgentState

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
