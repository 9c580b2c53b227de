"""``--gres=shard:N``: Slurm's shares of a GPU (gres.html, "Sharding") as gpufleet's
time-sliced replicas (ADR 0052, ``model/replicas.py``).

A Slurm shard is a share of whichever GPU the job lands on; a gpufleet replica is asked for as
its share, one N-th of a GPU where nodes offer N replicas. ``shard:1`` is therefore mapped,
at submit, onto the one share the cluster's replica nodes offer (``replicas``: the replica
counts of its nodes, from the controller). More than one shard is refused, as more than one
replica is (NVIDIA's ``failRequestsGreaterThanOne``); shards with GPUs too are refused, since
Slurm gives a GPU either whole (``gpu``) or as shards, not both."""

from __future__ import annotations

from gpufleet.io.sbatch.request import CANNOT, Build
from gpufleet.model import replicas as rep
from gpufleet.model.engines import CAPABILITIES
from gpufleet.model.resources import MILLI


def shard_milli(b: Build) -> int | None:
    """The share (thousandths of one GPU) a ``--gres=shard:1`` worker asks for; None when the
    job asks for no shard; a refusal (SpecError) when it cannot be given."""
    r = b.req
    shards = [g for g in r.gres if g.name == "shard"]
    if not shards:
        return None
    gres = b.text("gres")
    gpus = r.gpus or r.gpus_per_node or r.gpus_per_task or r.gpus_per_socket
    if gpus or any(g.name in CAPABILITIES for g in r.gres):
        names = [n for n in ("gres", "gpus", "gpus-per-node", "gpus-per-task") if n in b.seen]
        raise b.err(
            f"{' and '.join(b.text(n) for n in names)} asks for GPUs and shards at once; Slurm "
            "gives a GPU either whole (gpu) or as shards (shard), never both: ask one",
            *names,
        )
    count = sum(g.count for g in shards)
    if count != 1:
        raise b.err(
            f"{CANNOT}{gres} asks for {count} shards; a worker gets one replica of a "
            "time-sliced GPU, never more (as NVIDIA's device plugin with "
            "failRequestsGreaterThanOne, ADR 0052): ask --gres=shard:1",
            "gres",
        )
    if b.replicas is None:  # read away from the controller (gpufleet submit)
        raise b.err(
            f"{CANNOT}{gres} here: the nodes' replica counts are known to the controller; "
            "submit with sbatch, or ask gpufleet submit --gpu-share 0.25 for one of 4 replicas",
            "gres",
        )
    counts = sorted(set(b.replicas))
    if not counts:
        raise b.err(
            f"{CANNOT}{gres}: no node here offers its GPUs as shards (a pool's gpu_replicas, "
            "an agent's --gpu-replicas)",
            "gres",
        )
    if len(counts) > 1:
        shares = " or ".join(f"{rep.milli(n) / MILLI:g} (one of {n})" for n in counts)
        raise b.err(
            f"{CANNOT}{gres}: the nodes offer their GPUs as {' or '.join(map(str, counts))} "
            "shards each, and a gpufleet replica is asked for by its share: ask gpufleet "
            f"submit --gpu-share {shares}",
            "gres",
        )
    return rep.milli(counts[0])
