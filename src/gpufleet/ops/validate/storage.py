"""Layer 3, storage: the shared path holds the same content on every node (rank 0 of the node
probe writes a marker holding this run's random token, every node hashes what it reads), and
each node's sequential write (with fsync) and read throughput and 4 KiB IOPS (fio where
installed, else built in) meet the thresholds."""

from __future__ import annotations

import hashlib
from typing import Any

from gpufleet.ops.validate.checks import Check, failed, skipped, verdict
from gpufleet.ops.validate.common import section
from gpufleet.ops.validate.context import Context

LAYER = "storage"


def shared_check(ctx: Context, node: str, st: dict[str, Any]) -> Check:
    want = hashlib.sha256(ctx.token.encode()).hexdigest()
    m = section(st, "marker")
    if m.get("error"):
        return failed(
            LAYER,
            "shared path",
            node,
            "unreadable",
            "this run's marker",
            f"{m['error']}: mount {ctx.settings.shared} on this node (the export the others use)",
        )
    got = m.get("marker_sha256", "")
    where = f"{m.get('fstype', '?')} {m.get('source', '')}".strip()
    return verdict(
        got == want,
        LAYER,
        "shared path",
        node,
        f"sha256 {got[:12]}… on {where}",
        f"sha256 {want[:12]}…",
        f"{ctx.settings.shared} here is not the storage the other nodes share (a local directory, "
        "a stale mount, or a cache that has not caught up): check mount and the export",
    )


def io_checks(ctx: Context, node: str, st: dict[str, Any]) -> list[Check]:
    s = ctx.settings
    io = section(st, "io")
    where = f"{st.get('path')} ({st.get('fstype', '?')})"
    if io.get("error") or not io:
        return [
            failed(
                LAYER,
                "throughput",
                node,
                "failed",
                "measured",
                f"{io.get('error', 'no result')} on {where}",
            )
        ]
    tool = io.get("tool", "builtin")
    hint = (
        "the storage is slower than required: check its load (iostat -x), the network to it, "
        "and the mount options; read in larger blocks or cache the dataset on local NVMe"
    )
    out = []
    for key, name, want, unit in (
        ("write_mbps", "write throughput", s.min_write_mbps, "MB/s"),
        ("read_mbps", "read throughput", s.min_read_mbps, "MB/s"),
        ("rand_read_iops", "4 KiB read IOPS", s.min_iops, "IOPS"),
        (
            "small_file_iops",
            "small-file IOPS" if tool == "builtin" else "4 KiB fsync-write IOPS",
            s.min_iops,
            "IOPS",
        ),
    ):
        v = io.get(key)
        if v is None:
            out.append(skipped(LAYER, name, node, f"{tool} reported no {name}"))
            continue
        note = (
            " (page cache not dropped)"
            if key == "read_mbps" and io.get("read_cache_dropped") is False
            else ""
        )
        out.append(
            verdict(
                float(v) >= want,
                LAYER,
                name,
                node,
                f"{v:,} {unit}{note} ({tool}, {where})",
                f"≥ {want:g} {unit}",
                hint,
            )
        )
    return out


def checks(ctx: Context) -> list[Check]:
    s = ctx.settings
    targets = ctx.targets()
    if not targets:
        return [skipped(LAYER, "storage", "cluster", "no idle node to probe")]
    probe = ctx.node_probe()
    results = probe.results()
    out: list[Check] = []
    if not s.shared:
        out.append(
            skipped(
                LAYER,
                "shared path",
                "cluster",
                "no --shared PATH given; throughput measured in each job's working directory",
            )
        )
    for n in targets:
        res = results.get(n.name)
        st = section(res, "storage")
        if not st or st.get("error"):
            why = str(st.get("error")) if st else probe.problem(n.name)
            out.append(failed(LAYER, "storage probe", n.name, "no result", "a result", why))
            continue
        if s.shared:
            out.append(shared_check(ctx, n.name, st))
        out += io_checks(ctx, n.name, st)
    return out
