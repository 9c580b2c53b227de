"""What a job was given, read from what the agent told it and what its host has: the render and
transcode examples take their GPU path only when both say so, never by guessing from the
hardware. ``CUDA_VISIBLE_DEVICES`` names the job's GPUs, ``NVIDIA_DRIVER_CAPABILITIES`` the
driver libraries it asked for (``video`` for NVENC/NVDEC, as the container toolkit reads it),
and a real NVIDIA driver has ``/dev/nvidiactl`` (simulated GPUs have none)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

# what CUDA reads as "no GPU" (the toolkit writes NoDevFiles when it hides them)
NO_GPU = frozenset({"", "-1", "NoDevFiles", "void", "none"})


@dataclass(frozen=True)
class Given:
    gpu: bool  # a real NVIDIA GPU with the capability asked about
    reason: str  # why, in words, for the job's log


def nvidia_gpu(env: Mapping[str, str], capability: str, dev: Path = Path("/dev")) -> Given:
    visible = env.get("CUDA_VISIBLE_DEVICES", "").strip()
    caps_text = env.get("NVIDIA_DRIVER_CAPABILITIES", "")
    caps = {c.strip() for c in caps_text.split(",")}
    if visible in NO_GPU:
        return Given(False, "the job was given no GPU (CUDA_VISIBLE_DEVICES is empty)")
    if capability not in caps and "all" not in caps:
        return Given(
            False,
            f"the job was given GPU {visible} without the driver's {capability} capability"
            f" (NVIDIA_DRIVER_CAPABILITIES={caps_text or 'unset'})",
        )
    if not (dev / "nvidiactl").exists():
        return Given(
            False,
            f"the job was given GPU {visible} with {capability}, but this host has no NVIDIA"
            f" driver ({dev / 'nvidiactl'} is missing: simulated GPUs, or no driver)",
        )
    return Given(True, f"the job was given GPU {visible} (NVIDIA_DRIVER_CAPABILITIES={caps_text})")
