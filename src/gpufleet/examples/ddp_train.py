"""A small DistributedDataParallel job on CPU (gloo): what `make demo`'s gang trains.

Reads the launcher environment gpufleet sets (MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK,
LOCAL_RANK), fits y = 3x + 1 with a linear model, and prints, on rank 0, the world size and the
final loss. Exits non-zero if the loss did not fall.

Checkpoints (README "Checkpoints"): where gpufleet names a checkpoint file
(``$GPUFLEET_CHECKPOINT_FILE``, the same for every attempt), rank 0 saves the model, the
optimizer and the step there (written whole, then renamed: the file appears complete) every
``--checkpoint-every`` steps and when SIGUSR1 comes (the signal a job declares with
``checkpoint: {signal: USR1, grace_s: 120}`` or ``#SBATCH --signal=USR1@120``): every rank
agrees at the next step, rank 0 saves, and the job trains on until its SIGTERM, which gpufleet
sends once the file is written. The next attempt starts from the step saved, not from step 0.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import Any

_asked = False  # SIGUSR1 came: save at the next step


def _ask(_sig: int, _frame: object) -> None:
    global _asked
    _asked = True


def _save(torch: Any, path: str, state: dict[str, Any]) -> None:
    tmp = f"{path}.tmp"
    torch.save(state, tmp)
    os.replace(tmp, path)  # gpufleet sees the file written once it is whole


def main(steps: int = 60, step_s: float = 0.0, checkpoint_every: int = 0) -> int:
    global _asked
    path = os.environ.get("GPUFLEET_CHECKPOINT_FILE", "")
    if path:  # first: a notice during torch's import must not end the process
        signal.signal(signal.SIGUSR1, _ask)
    import time

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(1234 + rank)
    model = DDP(torch.nn.Linear(1, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    start, first = 0, None
    if path and os.path.exists(path):
        saved = torch.load(path, weights_only=True)
        model.module.load_state_dict(saved["model"])
        opt.load_state_dict(saved["opt"])
        start, first = int(saved["step"]) + 1, float(saved["first_loss"])
        if rank == 0:
            restarts = os.environ.get("GPUFLEET_RESTART_COUNT", "?")
            print(f"resumed from step {saved['step']} (restart {restarts})", flush=True)
    last = 0.0
    for step in range(start, steps):
        x = torch.rand(64, 1)
        y = 3 * x + 1
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()  # type: ignore[no-untyped-call,unused-ignore]  # DDP all-reduces the gradients across every rank here
        opt.step()
        if first is None:
            first = loss.item()
        last = loss.item()
        if path:
            # every rank stops for the checkpoint at the same step (the signal reaches each
            # rank when it will): the largest flag of all
            flag = torch.tensor([1 if _asked else 0])
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            due = checkpoint_every > 0 and (step + 1) % checkpoint_every == 0
            if flag.item() or due:
                _asked = False
                if rank == 0:
                    state = {"model": model.module.state_dict(), "opt": opt.state_dict()}
                    # said before the file appears: the agent's SIGTERM follows the file at
                    # once, and a line printed after it could be lost to it
                    print(f"checkpoint at step {step}", flush=True)
                    _save(torch, path, {**state, "step": step, "first_loss": first})
        if step_s:
            time.sleep(step_s)
    if rank == 0:
        print(
            f"WORLD_SIZE={world} RANK={rank} LOCAL_RANK={os.environ.get('LOCAL_RANK')} "
            f"first_loss={first or 0.0:.4f} final_loss={last:.4f}",
            flush=True,
        )
    # every rank done with its collectives before any tears down: rank 0 serves the store the
    # others still talk to, and gloo's teardown racing a peer's last send aborted it (seen
    # once in CI: "terminate called without an active exception" after the final loss)
    dist.barrier()
    dist.destroy_process_group()
    return 0 if first is not None and last < first else 1


def _args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="A small DDP job on CPU that checkpoints.")
    p.add_argument("--steps", type=int, default=60, help="steps in all (default 60)")
    p.add_argument("--step-s", type=float, default=0.0, help="seconds to sleep after each step")
    p.add_argument("--checkpoint-every", type=int, default=0, help="also save every N steps")
    return p.parse_args(argv)


if __name__ == "__main__":
    a = _args(sys.argv[1:])
    rc = main(a.steps, a.step_s, a.checkpoint_every)
    sys.stdout.flush()
    sys.stderr.flush()
    # the process group is destroyed and every line written: skip the interpreter's teardown,
    # where torch's and gloo's C++ objects are destroyed in an order that can abort the
    # process ("terminate called without an active exception", exit 134: seen in CI after the
    # final loss, barrier and destroy_process_group notwithstanding)
    os._exit(rc)
