"""Resetting real GPUs for the heal loop (ADR 0042), and what NVML can and cannot do.

NVML's public API has no call that resets a GPU: ``nvmlDeviceResetGpuLockedClocks`` and
``nvmlDeviceResetMemoryLockedClocks`` only return locked clocks to their defaults,
``nvmlDeviceClearEccErrorCounts`` only clears the aggregate ECC counters, and
``nvmlDeviceRemoveGpu`` takes a GPU out of the driver's view (hot-plug), which does not bring it
back. The reset itself is ``nvidia-smi --gpu-reset`` (``-r``), which needs root, no process on
the GPU (the agent resets only a node that runs nothing), MIG off or its instances destroyed,
and on NVSwitch systems (HGX) every GPU of the node at once, so all of them are reset together.
A GPU that fell off the bus (XID 79) usually cannot be reset in software: the reset fails, the
round fails, and a node whose GPUs never come back is given up after its failures (RMA), or a
site command (a BMC power cycle) is configured as the remedy instead.
After the reset the locked clocks are returned to their defaults and NVML is started again, so
that discovery and the XID event set see the GPUs as they are now."""

from __future__ import annotations

import shutil
import subprocess
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpufleet.agent.nvml.backend import NvmlBackend

RESET_TIMEOUT_S = 300.0


class ResetFailed(Exception):
    """The GPUs could not be reset; the message says why, for the node's history."""


def reset_all(backend: NvmlBackend) -> str:
    """Reset every physical GPU of the node; what was done, in words."""
    inv = backend.inv
    if inv.mig:
        raise ResetFailed(
            "MIG devices are configured: destroy their instances (nvidia-smi mig -dci, -dgi) "
            "before a GPU reset, or configure a site command as the remedy"
        )
    smi = shutil.which("nvidia-smi")
    if smi is None:
        raise ResetFailed("nvidia-smi is not installed: NVML itself cannot reset a GPU")
    ids = [inv.phys_info[i].pci_bus_id or str(i) for i in sorted(inv.phys_info)]
    if not ids:
        raise ResetFailed("no GPU to reset: NVML finds none (fell off the bus?)")
    try:
        p = subprocess.run(
            [smi, "--gpu-reset", "-i", ",".join(ids)],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=RESET_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise ResetFailed(
            f"nvidia-smi --gpu-reset gave no answer in {RESET_TIMEOUT_S:g} s"
        ) from None
    except OSError as e:
        raise ResetFailed(f"nvidia-smi --gpu-reset could not run: {e}") from None
    said = (p.stdout + p.stderr).strip().splitlines()
    if p.returncode != 0:
        last = said[-1] if said else f"exit status {p.returncode}"
        raise ResetFailed(f"nvidia-smi --gpu-reset failed: {last[:300]}")
    for i, h in list(inv.phys.items()):
        backend.calls.call(i, "nvmlDeviceResetGpuLockedClocks", h)
        backend.calls.call(i, "nvmlDeviceResetMemoryLockedClocks", h)
    backend.restart()
    return f"nvidia-smi --gpu-reset of {len(ids)} GPUs"
