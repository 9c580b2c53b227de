"""Time-slicing with N replicas: a node (or a pool's nodes) offers each GPU as N replicas, as
NVIDIA's Kubernetes device plugin does with ``sharing: timeSlicing: resources: [{name:
nvidia.com/gpu, replicas: N}]`` and Slurm with ``shard`` GRES (ADR 0052).

A replica is one N-th of one GPU (``MILLI // N`` thousandths): a job asks for one as a share of
that size (``--gpu-share 0.25`` where N is 4). Such a node also takes whole GPUs, each one of
its GPUs whose N replicas are all free (Slurm's ``Gres=gpu:G,shard:G*N``: a GPU is given as a
``gpu`` or as shards, never both at once; ADR 0054), and nothing else: no share of another
size and no more than one replica per worker (the device plugin's
``failRequestsGreaterThanOne``), so modes never mix on one GPU. CUDA time-slices the
replicas' processes; nothing bounds a replica's memory or compute (NVIDIA: "no memory or fault
isolation between replicas"), and the task's log says so.

The setting travels as the node label ``gpufleet.io/gpu-replicas`` (the cluster spec's pool
field ``gpu_replicas``, the agent's ``--gpu-replicas``), so the scheduler, the simulator and
``gpufleet nodes`` read it where they read the other labels.
"""

from __future__ import annotations

from collections.abc import Iterable

from gpufleet.model.resources import MILLI

LABEL = "gpufleet.io/gpu-replicas"
SHARING_LABEL = "gpufleet.io/gpu-sharing"  # as agent/sharing.py says it
# agent/sharing.py's MODES; a node without the label shares the first way
SHARING_MODES = ("timeslice", "mps")
MAX_REPLICAS = 64


def check(n: int) -> int:
    """``n`` as a replica count, or ValueError saying what is allowed."""
    if not 2 <= n <= MAX_REPLICAS:
        raise ValueError(f"gpu replicas must be from 2 to {MAX_REPLICAS}, got {n}")
    return n


def labels(n: int) -> dict[str, str]:
    """The labels a node time-sliced with ``n`` replicas carries."""
    return {SHARING_LABEL: "timeslice", LABEL: str(check(n))}


def of(node_labels: Iterable[tuple[str, str]]) -> int:
    """The node's replicas per GPU; 0 when its GPUs are not offered as replicas."""
    for k, v in node_labels:
        if k == LABEL:
            return int(v) if (v.isascii() and v.isdigit()) and int(v) >= 2 else 0
    return 0


def sharing_of(node_labels: Iterable[tuple[str, str]]) -> str:
    """How the node shares a GPU held in fractions: its label, else time-slicing (CUDA's own,
    the agent's default)."""
    return next((v for k, v in node_labels if k == SHARING_LABEL), SHARING_MODES[0])


def milli(n: int) -> int:
    """One replica of a GPU offered as ``n``, in thousandths."""
    return MILLI // n


def takes(n: int, gpus: int, gpu_milli: int) -> bool:
    """Whether a node with ``n`` replicas per GPU (0: none) may take one worker asking ``gpus``
    devices of ``gpu_milli`` each: anything on a node without replicas, and there only workers
    without GPUs, with whole GPUs (each a GPU none of whose replicas is held) or with exactly one
    replica."""
    return not n or not gpus or gpu_milli >= MILLI or (gpus == 1 and gpu_milli == milli(n))


def refusal(n: int, gpus: int, gpu_milli: int) -> str:
    """Why a worker asking ``gpus`` × ``gpu_milli`` cannot use GPUs offered as ``n`` replicas."""
    one = f"{milli(n) / MILLI:g}"
    return (
        f"asks for {gpu_milli / MILLI:g} of a GPU per worker; the nodes that could take it "
        f"offer their GPUs time-sliced as {n} replicas each and give one replica ({one} of a "
        f"GPU, --gpu-share {one}) per worker, never more (as NVIDIA's device plugin with "
        "failRequestsGreaterThanOne), or whole GPUs"
    )
