"""The per-node probe: one rank per node of a whole-node gang, reporting the sections asked for
(``gpu``, ``visible``, ``system``, ``clock``, ``storage``) in one result line."""

from __future__ import annotations

import argparse
import os
import socket
from collections.abc import Sequence

from . import clock, common, gpu, storage, system

SECTIONS = ("gpu", "visible", "system", "clock", "storage")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gpufleet-probe node")
    p.add_argument("--sections", default=",".join(SECTIONS))
    p.add_argument("--controller", default="", help="controller URL, for the clock section")
    p.add_argument("--clock-samples", type=int, default=7)
    p.add_argument("--dcgm-level", type=int, default=0)
    p.add_argument("--torch-checks", action="store_true")
    p.add_argument("--seconds", type=float, default=1.0, help="per compute/bandwidth check")
    p.add_argument("--peers", default="", help="addresses to report routes to")
    p.add_argument("--storage-path", default="", help="default: the job's working directory")
    p.add_argument("--shared", default="")
    p.add_argument("--token", default="")
    p.add_argument("--storage-mb", type=int, default=256)
    p.add_argument("--storage-seconds", type=float, default=5.0)
    p.add_argument("--no-fio", action="store_true")
    return p


def probe(args: argparse.Namespace) -> common.Result:
    sections = {s.strip() for s in args.sections.split(",") if s.strip()}
    env = common.rank_env()
    res: common.Result = {
        "probe": "node",
        "hostname": socket.gethostname(),
        "env": env,
        "start_time": common.now(),
    }
    if "clock" in sections:  # first: the closer to the start, the less it has to explain
        res["clock"] = common.guarded(
            "clock", lambda: clock.offset(args.controller or None, args.clock_samples)
        )
    if "visible" in sections:
        res["visible"] = common.guarded("visible", gpu.visible)
    if "gpu" in sections:
        res["gpu"] = common.guarded(
            "gpu", lambda: gpu.collect(args.dcgm_level, args.torch_checks, args.seconds)
        )
    if "system" in sections:
        peers = [p for p in args.peers.split(",") if p]
        if args.controller:
            from urllib.parse import urlsplit

            host = urlsplit(args.controller).hostname
            if host:
                peers.append(host)
        res["system"] = common.guarded("system", lambda: system.collect(peers))
    if "storage" in sections:
        path = args.storage_path or os.getcwd()
        res["storage"] = common.guarded(
            "storage",
            lambda: storage.collect(
                path,
                shared=args.shared or None,
                token=args.token,
                rank=env["rank"],
                job=env["job"],
                mb=args.storage_mb,
                seconds=args.storage_seconds,
                use_fio=not args.no_fio,
            ),
        )
    res["end_time"] = common.now()
    return res


def main(argv: Sequence[str] | None = None) -> int:
    common.emit(probe(parser().parse_args(argv)))
    return 0
