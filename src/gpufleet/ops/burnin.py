"""The heal loop's device burn-in on a node: the device layer of ``gpufleet validate`` run on the
spot, without a job (ADR 0042). The node's agent runs this module (``python -m
gpufleet.ops.burnin``) on a node it drained and reset: the node probe's GPU section (driver,
device nodes, NVML, nvidia-smi, ``dcgmi diag``, and PyTorch's bf16 matmul and device-copy
stress on every GPU) judged by validate's own device checks against what the agent registered.
It prints one result line (``GPUFLEET-PROBE {json}``): ``ok`` (no check failed), the failures
and the skips, each in validate's words. Where a tool is absent (simulated GPUs, no PyTorch)
its checks are skipped, as validate skips them; the agent's own stress of its GPU backend
covers those nodes."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import cast

from gpufleet.api.schemas import GpuInfo, NodeOut
from gpufleet.client import Client
from gpufleet.ops.probes import common, gpu
from gpufleet.ops.validate import device
from gpufleet.ops.validate.checks import Check, Status
from gpufleet.ops.validate.context import Context
from gpufleet.ops.validate.settings import Settings


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m gpufleet.ops.burnin")
    p.add_argument("--node", required=True)
    p.add_argument("--gpu-model", default="")
    p.add_argument("--driver", default="")
    p.add_argument("--gpus", default="[]", help="the GpuInfo list the agent registered (JSON)")
    p.add_argument("--seconds", type=float, default=60.0, help="the whole stress, all GPUs")
    p.add_argument("--dcgm-level", type=int, default=1)
    # the network layer against a healthy peer: the net probe of validate, two ranks; this node
    # coordinates it (rank 0) and judges its link, the peer runs rank 1 (``--net-rank 1``)
    p.add_argument("--net-rank", type=int, choices=(0, 1), default=None)
    p.add_argument("--net-master", default="", help="the burning-in node's address")
    p.add_argument("--net-port", type=int, default=0)
    p.add_argument("--net-peer", default="", help="the peer's name, for the verdict")
    p.add_argument("--net-seconds", type=float, default=2.0)
    p.add_argument("--net-min-gbps", type=float, default=1.0)
    p.add_argument("--net-max-rtt-ms", type=float, default=2.0)
    return p


def node_of(args: argparse.Namespace) -> NodeOut:
    infos = [GpuInfo.model_validate(g) for g in json.loads(args.gpus)]
    return NodeOut(
        name=args.node,
        state="drained",
        gpu_model=args.gpu_model,
        gpus=len(infos),
        gpus_free=0,
        cpu_cores=0,
        cpu_free=0,
        memory_gib=0,
        memory_free_gib=0,
        leaf="",
        pod="",
        driver_version=args.driver,
        gpu_info=infos,
    )


def judge(node: NodeOut, res: common.Result, settings: Settings) -> list[Check]:
    """validate's device checks of one node's probe result (no controller: no client)."""
    ctx = Context(cast(Client, None), settings, ("device",), nodes=[node])
    out = device.native_view(node, res)
    row = device.ecc(ctx, node, res)
    if row is not None:
        out.append(row)
    results = {node.name: res}
    return out + device.dcgm(ctx, results) + device.compute(ctx, results)


def net_layer(args: argparse.Namespace) -> common.Result:
    """One rank of validate's net probe with the peer, as rolling maintenance runs it on a node
    (``onnode.link_checks``: one on-node network test); rank 0's link judged."""
    from gpufleet.ops.validate import onnode  # it imports this module: not at the top

    ns = argparse.Namespace(
        net_rank=args.net_rank,
        net_master=args.net_master,
        net_port=args.net_port,
        net_peer=args.net_peer,
        net_seconds=args.net_seconds,
        min_net_gbps=args.net_min_gbps,
        max_rtt_ms=args.net_max_rtt_ms,
    )
    checks = onnode.link_checks(args.node, ns)
    if args.net_rank != 0:
        return {"probe": "burn-in-net", "ok": True}  # the peer's half: judged by rank 0
    return verdict_of(checks)


def verdict_of(checks: list[Check]) -> common.Result:
    failed = [c for c in checks if c.status is Status.FAIL]
    return {
        "probe": "burn-in",
        "ok": not failed,
        "passed": [f"{c.target} {c.name}: {c.measured}" for c in checks if c.status is Status.PASS],
        "failed": [
            f"{c.target} {c.name}: {c.measured} (expected {c.expected}) {c.detail}".strip()
            for c in failed
        ],
        "skipped": [f"{c.name}: {c.detail}" for c in checks if c.status is Status.SKIP],
    }


def run(args: argparse.Namespace) -> common.Result:
    if args.net_rank is not None:
        return net_layer(args)
    node = node_of(args)
    # the stress: each GPU's matmul and copy share the burn-in's time
    per_check = max(1.0, args.seconds / max(1, 2 * node.gpus))
    settings = Settings(dcgm_level=args.dcgm_level, compute_seconds=per_check)
    res: common.Result = {
        "gpu": common.guarded("gpu", lambda: gpu.collect(args.dcgm_level, True, per_check))
    }
    return verdict_of(judge(node, res, settings))


def main(argv: Sequence[str] | None = None) -> int:
    common.emit(run(parser().parse_args(argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
