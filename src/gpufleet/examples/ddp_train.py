"""A small DistributedDataParallel job on CPU (gloo): what `make demo`'s gang trains.

Reads the launcher environment gpufleet sets (MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK,
LOCAL_RANK), fits y = 3x + 1 with a linear model, and prints, on rank 0, the world size and the
final loss. Exits non-zero if the loss did not fall.
"""

from __future__ import annotations

import os
import sys


def main(steps: int = 60) -> int:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(1234 + rank)
    model = DDP(torch.nn.Linear(1, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    first = last = 0.0
    for step in range(steps):
        x = torch.rand(64, 1)
        y = 3 * x + 1
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()  # type: ignore[no-untyped-call,unused-ignore]  # DDP all-reduces the gradients across every rank here
        opt.step()
        if step == 0:
            first = loss.item()
        last = loss.item()
    if rank == 0:
        print(
            f"WORLD_SIZE={world} RANK={rank} LOCAL_RANK={os.environ.get('LOCAL_RANK')} "
            f"first_loss={first:.4f} final_loss={last:.4f}",
            flush=True,
        )
    # every rank done with its collectives before any tears down: rank 0 serves the store the
    # others still talk to, and gloo's teardown racing a peer's last send aborted it (seen
    # once in CI: "terminate called without an active exception" after the final loss)
    dist.barrier()
    dist.destroy_process_group()
    return 0 if last < first else 1


if __name__ == "__main__":
    sys.exit(main())
