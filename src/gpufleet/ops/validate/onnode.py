"""``python -m gpufleet.ops.validate.onnode --layers device,storage``: gpufleet validate's layers
run on one node by itself, as rolling maintenance asks its agent to (a node under maintenance is
drained: no probe job can be placed there). The same probes (``ops/probes``) and the same checks
as ``gpufleet validate`` where a check needs nothing but the node:

- device: the driver, device nodes, NVML and nvidia-smi's view (``device.native_view``);
- storage: throughput and IOPS where the node writes (``storage.io_checks``, its thresholds);
- network: an interface up with an address, a route to each ``--peer``, and, given a healthy
  peer node (``--net-rank 0 --net-master THIS --net-port P --net-peer NAME`` here and
  ``--net-rank 1`` with the same master and port on the peer, as the heal loop's burn-in runs
  it), validate's net probe between the two judged by validate's own link checks (bandwidth,
  round trip, MTU).

One line per check, then the checks as JSON on the last line; exit 1 on any FAIL."""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import tempfile
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any, cast

from gpufleet.client import Client
from gpufleet.ops import burnin
from gpufleet.ops.probes import common, gpu, net, system
from gpufleet.ops.probes import storage as storage_probe
from gpufleet.ops.validate import device, network, storage
from gpufleet.ops.validate.checks import Check, Status, failed, passed, verdict
from gpufleet.ops.validate.context import Context
from gpufleet.ops.validate.jobs import ProbeRun, RankOutput
from gpufleet.ops.validate.settings import Settings

LAYERS = ("device", "network", "storage")
D = Settings()


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m gpufleet.ops.validate.onnode")
    p.add_argument("--layers", default="device", help=f"comma-separated, of {', '.join(LAYERS)}")
    p.add_argument("--node", default="", help="the node's name (default: its hostname)")
    p.add_argument("--gpus", type=int, default=None, help="GPUs the node should show")
    p.add_argument("--storage-path", default="", help="where to measure (default: the tmp dir)")
    p.add_argument("--storage-mb", type=int, default=64)
    p.add_argument("--storage-seconds", type=float, default=2.0)
    p.add_argument("--min-write-mbps", type=float, default=D.min_write_mbps)
    p.add_argument("--min-read-mbps", type=float, default=D.min_read_mbps)
    p.add_argument("--min-iops", type=float, default=D.min_iops)
    p.add_argument("--peer", action="append", default=[], help="an address to route to")
    # validate's net probe against a healthy peer: this node is rank 0 (it judges the link),
    # the peer runs rank 1 with the same master and port (its half: nothing judged)
    p.add_argument("--net-rank", type=int, choices=(0, 1), default=None)
    p.add_argument("--net-master", default="", help="rank 0's address")
    p.add_argument("--net-port", type=int, default=0)
    p.add_argument("--net-peer", default="", help="the other node's name")
    p.add_argument("--net-seconds", type=float, default=2.0)
    p.add_argument("--min-net-gbps", type=float, default=D.min_net_gbps)
    p.add_argument("--max-rtt-ms", type=float, default=D.max_rtt_ms)
    return p


def device_checks(name: str, gpus: int | None) -> list[Check]:
    res = gpu.collect(dcgm_level=0)
    seen = len(res.get("smi", {}).get("gpus") or [])
    node = SimpleNamespace(name=name, gpu_info=[], gpus=seen if gpus is None else gpus)
    return device.native_view(cast(Any, node), {"gpu": res})


def storage_checks(name: str, args: argparse.Namespace) -> list[Check]:
    path = args.storage_path or tempfile.gettempdir()
    st = storage_probe.collect(
        path,
        shared=None,
        token="",
        rank=0,
        job="maintenance",
        mb=args.storage_mb,
        seconds=args.storage_seconds,
    )
    settings = Settings(
        min_write_mbps=args.min_write_mbps, min_read_mbps=args.min_read_mbps, min_iops=args.min_iops
    )
    return storage.io_checks(cast(Context, SimpleNamespace(settings=settings)), name, st)


def network_checks(name: str, peers: Sequence[str]) -> list[Check]:
    up = [
        i
        for i in system.interfaces()
        if i["name"] != "lo" and i.get("operstate") in ("up", "unknown") and i.get("addresses")
    ]
    names = ", ".join(i["name"] for i in up) or "none"
    out = [
        verdict(
            bool(up),
            "network",
            "interface up",
            name,
            names,
            "one up, with an address",
            "no interface is up with an address: check the links (ip link) and the network setup",
        )
    ]
    for peer in peers:
        r = system.route_to(peer)
        if r.get("error") or not r.get("src"):
            why = r.get("error") or "no source address"
            out.append(failed("network", "route", f"{name} → {peer}", why, "a route", str(why)))
        else:
            out.append(
                passed("network", "route", f"{name} → {peer}", str(r.get("dev", "")), "a route")
            )
    return out


def link_checks(name: str, args: argparse.Namespace) -> list[Check]:
    """One rank of validate's net probe with the peer; rank 0's link judged as validate does."""
    os.environ.update(
        RANK=str(args.net_rank),
        WORLD_SIZE="2",
        MASTER_ADDR=args.net_master,
        MASTER_PORT=str(args.net_port),
    )
    argv = ["--mode", "ring", "--seconds", f"{args.net_seconds:g}", "--mb", "256"]
    res = common.guarded("net", lambda: net.probe(net.parser().parse_args(argv)))
    if args.net_rank != 0:
        return []  # the peer's half: the link is judged where it is measured from
    settings = Settings(min_net_gbps=args.min_net_gbps, max_rtt_ms=args.max_rtt_ms)
    node = burnin.node_of(argparse.Namespace(node=name, gpus="[]", gpu_model="", driver=""))
    ctx = Context(cast(Client, None), settings, ("network",), nodes=[node])
    ranks = [
        RankOutput(0, name, [], result=res),
        RankOutput(1, args.net_peer, [], result={"links": []}),  # its own link: its verdict
    ]
    return network.link_checks(ctx, ProbeRun("maintenance", ranks=ranks))


def run(args: argparse.Namespace) -> list[Check]:
    asked = [x.strip() for x in args.layers.split(",") if x.strip()]
    unknown = [x for x in asked if x not in LAYERS]
    if unknown:
        raise ValueError(f"unknown layer {unknown[0]!r}: on a node, {', '.join(LAYERS)}")
    name = args.node or socket.gethostname()
    out: list[Check] = []
    for layer in (x for x in LAYERS if x in asked):
        try:
            if layer == "device":
                out += device_checks(name, args.gpus)
            elif layer == "storage":
                out += storage_checks(name, args)
            else:
                out += network_checks(name, args.peer)
                if args.net_rank is not None:
                    out += link_checks(name, args)
        except Exception as e:  # one broken layer must not hide the others' results
            out.append(failed(layer, "layer", name, "crashed", "completes", repr(e)))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        checks = run(args)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for c in checks:
        detail = f"  {c.detail}" if c.status is not Status.PASS and c.detail else ""
        print(f"{c.status.value} {c.layer} {c.name} {c.target}: {c.measured}{detail}")
    print(json.dumps([c.to_dict() for c in checks]))
    return 1 if any(c.status is Status.FAIL for c in checks) else 0


if __name__ == "__main__":
    sys.exit(main())
