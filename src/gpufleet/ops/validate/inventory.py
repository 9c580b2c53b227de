"""Device checks from what each agent registered (GET /nodes) and the cluster spec: node
health, the GPUs each node should have, one driver and CUDA version, PCIe links, NVLink."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from gpufleet.api.schemas import NodeOut
from gpufleet.model import catalog
from gpufleet.model.cluster import ClusterSpec
from gpufleet.ops.validate.checks import Check, failed, passed, skipped, verdict, warned

LAYER = "device"
# The PCIe generation each model's GPU links at (at least); the width is x16 for all of them.
PCIE_GEN = {
    "B200": 5,
    "H200": 5,
    "H100-SXM": 5,
    "H100-PCIe": 5,
    "H800": 5,
    "MI300X": 5,
    "A100-40GB": 4,
    "A100-80GB": 4,
    "A800": 4,
    "L40S": 4,
    "L40": 4,
    "A10": 4,
    "RTX-A6000": 4,
    "RTX-4090": 4,
    "T4": 3,
    "V100-16GB": 3,
    "V100-32GB": 3,
    "P100": 3,
}
PCIE_WIDTH = 16
HEALTH_DRAIN = "failed its health checks"


def expected_nvlinks(model: str) -> int | None:
    """NVLinks per GPU an SXM part has (50 GB/s links through Hopper, 100 on Blackwell); 0 for
    a part without NVLink; None where NVLink is an optional bridge or the model is unknown."""
    m = catalog.find(model)
    if m is None or m.vendor != "NVIDIA":
        return None
    if m.nvlink_gbs <= 0:
        return 0
    if m.form_factor != "SXM":
        return None
    return round(m.nvlink_gbs / (100 if m.nvlink_gbs >= 1800 else 50))


def health(n: NodeOut) -> Check:
    name, t = "node health", n.name
    if n.state in ("idle", "mixed", "allocated"):
        return passed(LAYER, name, t, n.state, "healthy, in service")
    why = n.why or "no reason given"
    if n.state == "lost":
        return failed(LAYER, name, t, "lost", "healthy", f"no heartbeat: {why}")
    if n.state == "unhealthy" or (n.state == "drained" and why.startswith(HEALTH_DRAIN)):
        return failed(LAYER, name, t, n.state, "healthy", f"its agent reports: {why}")
    return warned(LAYER, name, t, n.state, "in service", f"drained by an admin: {why}")


def spec_membership(nodes: Sequence[NodeOut], spec: ClusterSpec | None) -> list[Check]:
    if spec is None:
        return []
    have = {n.name for n in nodes}
    want = {n.name for n in spec.nodes}
    out = [
        failed(
            LAYER,
            "registered",
            name,
            "absent",
            "registered",
            "in the cluster spec, but no agent registered it",
        )
        for name in sorted(want - have)
    ]
    out += [
        warned(
            LAYER,
            "registered",
            name,
            "registered",
            "in the spec",
            "this node is not in the cluster spec",
        )
        for name in sorted(have - want)
    ]
    return out


def expected_gpus(
    n: NodeOut, nodes: Sequence[NodeOut], spec: ClusterSpec | None
) -> tuple[int, str, str]:
    """(count, model, where the expectation comes from)."""
    if spec is not None:
        for sn in spec.nodes:
            if sn.name == n.name:
                return sn.gpus, sn.gpu_model, "cluster spec"
    peers = [p.gpus for p in nodes if p.gpu_model == n.gpu_model and p.state != "lost"]
    if len(peers) > 1:
        (count, k), *_ = sorted(Counter(peers).items(), key=lambda kv: (-kv[1], -kv[0]))
        return count, n.gpu_model, f"{k} of {len(peers)} {n.gpu_model} nodes"
    return n.gpus, n.gpu_model, "registered"


def gpu_count(n: NodeOut, nodes: Sequence[NodeOut], spec: ClusterSpec | None) -> Check:
    want, model, source = expected_gpus(n, nodes, spec)
    indices = sorted(g.index for g in n.gpu_info)
    have = len(indices) if n.gpu_info else n.gpus
    measured = f"{have} × {n.gpu_model or 'no GPU'}"
    expected = f"{want} × {model or 'no GPU'} ({source})"
    top = max([want, *(i + 1 for i in indices)]) if indices else want
    missing = sorted(set(range(top)) - set(indices)) if n.gpu_info else []
    if missing:
        gone = ", ".join(str(i) for i in missing)
        return failed(
            LAYER,
            "gpu count",
            n.name,
            measured,
            expected,
            f"GPU {gone} missing from what the agent found (fallen off the bus, or not "
            "recognized: check the driver, dmesg for XID 79, and reseat or replace the GPU)",
        )
    if model and n.gpu_model and model != n.gpu_model:
        return failed(
            LAYER,
            "gpu count",
            n.name,
            measured,
            expected,
            f"the node has {n.gpu_model}, not {model}",
        )
    if have < want:
        return failed(
            LAYER,
            "gpu count",
            n.name,
            measured,
            expected,
            f"{want - have} GPU(s) fewer than expected: not recognized by the driver, "
            "or not installed",
        )
    if have > want:
        return warned(
            LAYER,
            "gpu count",
            n.name,
            measured,
            expected,
            "more GPUs than expected: update the spec",
        )
    return passed(LAYER, "gpu count", n.name, measured, expected)


def versions(nodes: Sequence[NodeOut], what: str) -> Check:
    """One driver (or CUDA) version across the cluster."""
    attr = "driver_version" if what == "driver" else "cuda_version"
    name = f"{what} version"
    seen = {n.name: getattr(n, attr) for n in nodes if n.state != "lost" and getattr(n, attr)}
    if not seen:
        return skipped(LAYER, name, "cluster", f"no agent reported a {what} version")
    counts = Counter(seen.values())
    if len(counts) == 1:
        ((v, k),) = counts.items()
        return passed(LAYER, name, "cluster", f"{v} on {k} node(s)", "one version")
    majority = counts.most_common(1)[0][0]
    odd = sorted(n for n, v in seen.items() if v != majority)
    listing = "; ".join(
        f"{v} on {', '.join(sorted(n for n, x in seen.items() if x == v))}" for v in counts
    )
    return failed(
        LAYER,
        name,
        "cluster",
        listing,
        "one version",
        f"{', '.join(odd)} differ(s) from {majority}: install the same {what} everywhere "
        "(mixed drivers break NCCL and make failures node-dependent)",
    )


def pcie(n: NodeOut) -> Check:
    gen = PCIE_GEN.get(n.gpu_model)
    if not n.gpu_info or all(g.pcie_gen == 0 for g in n.gpu_info):
        return skipped(LAYER, "pcie link", n.name, "the agent reported no PCIe link figures")
    slow = [g for g in n.gpu_info if (gen and g.pcie_gen < gen) or 0 < g.pcie_width < PCIE_WIDTH]
    figures = Counter(f"gen {g.pcie_gen} ×{g.pcie_width}" for g in n.gpu_info)
    measured = ", ".join(f"{k} on {v} GPU(s)" for k, v in figures.items())
    expected = f"gen ≥ {gen} ×{PCIE_WIDTH}" if gen else f"×{PCIE_WIDTH}"
    detail = ", ".join(f"GPU {g.index} gen {g.pcie_gen} ×{g.pcie_width}" for g in slow)
    return verdict(
        not slow,
        LAYER,
        "pcie link",
        n.name,
        measured,
        expected,
        f"{detail}: a slot, riser or BIOS setting limits the link (reseat; check the BIOS PCIe "
        "speed; nvidia-smi -q -d PCIE)",
    )


def nvlink(n: NodeOut) -> Check:
    want = expected_nvlinks(n.gpu_model)
    ups = [g.nvlink_up for g in n.gpu_info]
    if not ups:
        return skipped(LAYER, "nvlink", n.name, "no GPU inventory registered")
    if want == 0:
        return skipped(LAYER, "nvlink", n.name, f"{n.gpu_model} has no NVLink")
    if want is None:
        if not any(ups):
            return skipped(
                LAYER, "nvlink", n.name, f"no NVLink bridges on {n.gpu_model or 'this model'}"
            )
        want = max(ups)
    down = [g for g in n.gpu_info if g.nvlink_up < want]
    measured = (
        f"{min(ups)}–{max(ups)} links up per GPU"
        if min(ups) != max(ups)
        else f"{ups[0]} links up per GPU"
    )
    detail = ", ".join(f"GPU {g.index}: {g.nvlink_up} of {want}" for g in down)
    return verdict(
        not down,
        LAYER,
        "nvlink",
        n.name,
        measured,
        f"{want} per GPU",
        f"{detail} (nvidia-smi nvlink -s; "
        "an NVLink XID 74 or a failed NVSwitch/fabric manager: check nv-fabricmanager, then reset)",
    )


def checks(nodes: Sequence[NodeOut], spec: ClusterSpec | None) -> list[Check]:
    out = [health(n) for n in nodes]
    out += spec_membership(nodes, spec)
    live = [n for n in nodes if n.state != "lost"]
    out += [gpu_count(n, nodes, spec) for n in live]
    out += [versions(nodes, "driver"), versions(nodes, "cuda")]
    out += [pcie(n) for n in live if n.gpus]
    out += [nvlink(n) for n in live if n.gpus]
    return out
