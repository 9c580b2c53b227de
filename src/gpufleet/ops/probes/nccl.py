"""NCCL all-reduce bus bandwidth across the gang's nodes, the way nccl-tests reports it.

One rank runs per node; it forks one worker per GPU it was given (global rank = node rank ×
GPUs + local rank, as torchrun numbers them), and every worker all-reduces buffers of each size.
Bus bandwidth = size / time × 2(n − 1) / n, the figure that compares with the link speed
whatever the number of ranks. Skipped, saying why, without PyTorch, CUDA or NCCL."""

from __future__ import annotations

import argparse
import importlib.util
import multiprocessing as mp
import os
import time
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from . import common, gpu


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gpufleet-probe nccl")
    p.add_argument("--sizes-mb", default="64,512")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--timeout", type=float, default=120.0)
    return p


def bus_bandwidth(size_bytes: int, seconds: float, ranks: int) -> float:
    """GB/s on the bus for one all-reduce of ``size_bytes`` that took ``seconds``."""
    if seconds <= 0 or ranks < 1:
        return 0.0
    return size_bytes / seconds / 1e9 * (2 * (ranks - 1) / ranks)


def _worker(local: int, per_node: int, args: argparse.Namespace, q: Any) -> None:
    import torch  # type: ignore[import-not-found, unused-ignore]
    import torch.distributed as dist  # type: ignore[import-not-found, unused-ignore]

    env = common.rank_env()
    world = env["world"] * per_node
    rank = env["rank"] * per_node + local
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(local))
    try:
        torch.cuda.set_device(local)
        dist.init_process_group(
            "nccl", init_method="env://", timeout=timedelta(seconds=args.timeout)
        )
        rows = []
        for mb in [int(x) for x in args.sizes_mb.split(",") if x.strip()]:
            x = torch.ones((mb << 20) // 4, device=f"cuda:{local}", dtype=torch.float32)
            for _ in range(args.warmup):
                dist.all_reduce(x)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(args.iters):
                dist.all_reduce(x)
            torch.cuda.synchronize()
            t = (time.perf_counter() - t0) / args.iters
            rows.append(
                {
                    "size_mb": mb,
                    "time_ms": round(t * 1000, 3),
                    "busbw_gbs": round(bus_bandwidth(mb << 20, t, world), 2),
                }
            )
        dist.destroy_process_group()
        q.put({"local": local, "rank": rank, "results": rows})
    except Exception as e:
        q.put({"local": local, "rank": rank, "error": f"{type(e).__name__}: {e}"})


def probe(args: argparse.Namespace) -> common.Result:
    env = common.rank_env()
    res: common.Result = {"probe": "nccl", "rank": env["rank"], "world": env["world"]}
    if importlib.util.find_spec("torch") is None:
        res["skipped"] = "PyTorch is not installed"
        return res
    info = gpu.torch_info(run_checks=False)
    if not info.get("cuda"):
        res["skipped"] = f"no CUDA for PyTorch: {info.get('why', 'unavailable')}"
        return res
    if not info.get("nccl"):
        res["skipped"] = "this PyTorch has no NCCL"
        return res
    per_node = int(info.get("device_count") or 0)
    ctx = mp.get_context("fork")  # the workers inherit this program; CUDA starts in each
    q = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(i, per_node, args, q)) for i in range(per_node)]
    for p in procs:
        p.start()
    out = []
    deadline = time.monotonic() + args.timeout + 60
    for _ in procs:
        try:
            out.append(q.get(timeout=max(1.0, deadline - time.monotonic())))
        except Exception:
            break
    for p in procs:
        p.join(5)
        if p.is_alive():
            p.kill()
    res["gpus"] = per_node
    res["ranks"] = per_node * env["world"]
    res["workers"] = sorted(out, key=lambda r: r["local"])
    errors = [w["error"] for w in out if "error" in w]
    if len(out) < per_node:
        errors.append(f"{per_node - len(out)} workers reported nothing (hung or crashed)")
    if errors:
        res["error"] = "; ".join(errors)
    first = next((w for w in out if w.get("rank") == 0 and "results" in w), None)
    if first is not None:
        res["results"] = first["results"]
    return res


def main(argv: Sequence[str] | None = None) -> int:
    common.emit(probe(parser().parse_args(argv)))
    return 0
