"""The NVML backend (nvidia-ml-py's ``pynvml``).

The module is passed in (tests hand over a fake) and imported only when none is given, so this
file imports on a machine without a driver. Every NVML read is guarded: a call the device does
not support, or that fails, leaves its field ``None``; a monitoring read never stops the agent.
A call that answered NOT_SUPPORTED is not asked again for that GPU (a real H200 answers so to
the retired-page calls every time); any other failure is asked again at the next sample.
A GPU whose calls answer "GPU is lost" drops out of ``sample`` (the health check sees it gone).
DCGM's profiling fields (``DCGM_FI_PROF_*``), which NVML does not have, come from
``agent/dcgm.py`` where DCGM is installed, and are left out where it is not.

MIG (Multi-Instance GPU), as NVIDIA's device plugin's ``mig-strategy=mixed`` and Slurm's
AutoDetect=nvml do: a GPU whose current MIG mode is on offers its MIG devices, not itself (CUDA
sees only those on it, by their ``MIG-…`` UUIDs); each is a GPU of the node with its own UUID,
memory and model, the parent's catalog name and the profile (``H200-1g.18gb``). A GPU in MIG
mode without instances offers nothing. NVML has no utilisation, temperature, power, ECC or XIDs
per MIG device: each gets its parent's (an XID on the parent makes all its slices unhealthy),
and its own memory. The node's GPUs are numbered in NVML's order, a MIG GPU's devices in its
place, so a node without MIG keeps NVML's indices. DCGM's profiling fields go to whole GPUs only.
"""

from gpufleet.agent.nvml.backend import NvmlBackend
from gpufleet.agent.nvml.names import MIB, catalog_name, mig_profile

__all__ = ["MIB", "NvmlBackend", "catalog_name", "mig_profile"]
