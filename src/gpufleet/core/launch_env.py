"""The environment each rank of a gang gets: PyTorch's launcher variables and Slurm's."""

from __future__ import annotations

from gpufleet.model.allocation import Allocation, nodes_of

MASTER_PORT_BASE = 29500
MASTER_PORT_SPAN = 2000


def rank_env(
    job_id: str, seq: int, attempt: int, allocation: Allocation
) -> tuple[tuple[tuple[str, str], ...], ...]:
    """One environment per rank. MASTER_ADDR is the first node's *name*; the executor that
    knows addresses rewrites it. CUDA_VISIBLE_DEVICES is the agent's to set (it knows UUIDs)."""
    nodes = nodes_of(allocation)
    node_rank = {n: i for i, n in enumerate(nodes)}
    world = len(allocation)
    port = MASTER_PORT_BASE + (seq * 7 + attempt) % MASTER_PORT_SPAN
    local_counter: dict[str, int] = {}
    out = []
    for rank, p in enumerate(allocation):
        local = local_counter.get(p.node, 0)
        local_counter[p.node] = local + 1
        per_node = sum(1 for q in allocation if q.node == p.node)
        env = {
            "MASTER_ADDR": nodes[0],
            "MASTER_PORT": str(port),
            "WORLD_SIZE": str(world),
            "RANK": str(rank),
            "LOCAL_RANK": str(local),
            "LOCAL_WORLD_SIZE": str(per_node),
            "NODE_RANK": str(node_rank[p.node]),
            "GPUFLEET_JOB_ID": job_id,
            "GPUFLEET_ATTEMPT": str(attempt),
            "SLURM_JOB_ID": job_id,
            "SLURM_PROCID": str(rank),
            "SLURM_NTASKS": str(world),
            "SLURM_LOCALID": str(local),
            "SLURM_NODEID": str(node_rank[p.node]),
            "SLURM_NNODES": str(len(nodes)),
            "SLURM_JOB_NODELIST": ",".join(nodes),
            "SLURM_JOB_NUM_NODES": str(len(nodes)),
        }
        out.append(tuple(sorted(env.items())))
    return tuple(out)
