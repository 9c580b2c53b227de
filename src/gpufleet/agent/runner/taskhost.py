"""What every launch on this node reads: where the agent keeps its tasks' files, whose account
it is, what it tells a task of its GPUs, what the admin gives every task, and where srun is."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gpufleet.agent.accounts import Account
from gpufleet.agent.gpu import DeviceRef
from gpufleet.agent.sharing import Sharing
from gpufleet.agent.tasks import Key


@dataclass
class TaskHost:
    data_dir: Path
    # GPUs → what a task's CUDA_VISIBLE_DEVICES says
    visible_devices: Callable[[Sequence[int]], str]
    as_root: bool  # whether tasks run as their owner's account (else all as the agent's)
    agent: Account  # the agent's own account
    # how a container runtime names the GPUs (MIG devices above all); None: by index
    device_refs: Callable[[Sequence[int]], Sequence[DeviceRef]] | None = None
    # what the node's admin gives every task (--task-env); never the agent's environment
    node_env: dict[str, str] = field(default_factory=dict)
    step_bin: str = ""  # where srun/scontrol are (slurmbin.install); "" for none
    # how a GPU held in fractions is shared (agent/sharing.py): what a task is told of its share
    sharing: Sharing = field(default_factory=Sharing)

    def log_paths(self, key: Key) -> tuple[Path, Path]:
        job, attempt, rank = key
        d = self.data_dir / job / str(attempt)
        return d / f"rank{rank}.out", d / f"rank{rank}.err"

    def tmp_path(self, key: Key) -> Path:
        job, attempt, rank = key
        return self.data_dir / job / str(attempt) / f"rank{rank}.tmpdir"

    def pid_path(self, key: Key) -> Path:
        job, attempt, rank = key
        return self.data_dir / job / str(attempt) / f"rank{rank}.pid"

    def exit_path(self, key: Key) -> Path:
        """Where the task's keeper records its exit status (kept until the controller has
        the exit: a restarted agent reports it from there)."""
        job, attempt, rank = key
        return self.data_dir / job / str(attempt) / f"rank{rank}.exit"
