"""Layer 1, devices: the registered inventory (``inventory``) and what a probe job pinned to
each node sees with the node's own tools: the driver and device nodes, NVML, nvidia-smi's
count, ECC mode, ``dcgmi diag``, a short compute and memory-bandwidth run with PyTorch; double-
bit ECC errors from the controller's ``/metrics``."""

from __future__ import annotations

from typing import Any

from gpufleet.api.schemas import NodeOut
from gpufleet.model import catalog
from gpufleet.ops.validate import inventory
from gpufleet.ops.validate.checks import Check, failed, passed, skipped, verdict
from gpufleet.ops.validate.common import grouped_skips, parse_prometheus, section
from gpufleet.ops.validate.context import Context

LAYER = "device"
NO_DRIVER = (
    "no NVIDIA driver visible to the probe (no /proc/driver/nvidia, no nvidia-smi) although "
    "the agent registered GPUs: simulated GPUs, or a container without the driver mounted"
)


def native_view(n: NodeOut, res: dict[str, Any]) -> list[Check]:
    """The node's own tools against what its agent registered."""
    g = section(res, "gpu")
    drv, smi, nvml = section(g, "driver"), section(g, "smi"), section(g, "nvml")
    registered = len(n.gpu_info) if n.gpu_info else n.gpus
    if not drv.get("loaded") and not smi.get("present"):
        return [skipped(LAYER, "gpus seen on the node", n.name, NO_DRIVER)]
    out = []
    if not drv.get("loaded"):
        out.append(
            failed(
                LAYER,
                "driver loaded",
                n.name,
                "no nvidia module",
                "nvidia loaded",
                "the kernel module is not loaded: modprobe nvidia; check dmesg and Secure Boot "
                "(an unsigned module is refused), and that the driver matches the kernel",
            )
        )
    else:
        out.append(passed(LAYER, "driver loaded", n.name, drv.get("version") or "loaded", "loaded"))
    if smi.get("gpus") is not None:
        seen = len(smi["gpus"])
        out.append(
            verdict(
                seen == registered,
                LAYER,
                "gpus seen on the node",
                n.name,
                f"{seen} (nvidia-smi)",
                f"{registered} (registered)",
                "the node's driver and its agent disagree: restart the agent after a GPU "
                "change; a GPU absent from nvidia-smi is not recognized (lspci, dmesg)",
            )
        )
    else:
        err = smi.get("error") or nvml.get("error") or "unknown error"
        out.append(
            failed(
                LAYER,
                "gpus seen on the node",
                n.name,
                "nvidia-smi failed",
                f"{registered}",
                f"{err} (NVML: {nvml.get('error', 'ok')}): run 'gpufleet doctor node {n.name}'",
            )
        )
    denied = [d["path"] for d in g.get("dev", []) if not d.get("rw")]
    if denied:
        out.append(
            failed(
                LAYER,
                "device permissions",
                n.name,
                ", ".join(denied),
                "read-write for jobs",
                "jobs cannot open these device nodes: fix their mode (0666 or the video group)",
            )
        )
    smi_gpus = smi.get("gpus") or [{}]
    native = smi_gpus[0].get("driver_version") or nvml.get("driver_version")
    if native and n.driver_version and native != n.driver_version:
        out.append(
            failed(
                LAYER,
                "driver version",
                n.name,
                f"{native} (node)",
                f"{n.driver_version} (registered)",
                "the driver changed since the agent registered: restart the agent (or reboot)",
            )
        )
    return out


def ecc(ctx: Context, n: NodeOut, res: dict[str, Any]) -> Check | None:
    gpus = section(res, "gpu", "smi").get("gpus")
    if not gpus:
        return None
    modes = [str(g.get("ecc.mode.current", "")) for g in gpus]
    off = [str(g.get("index")) for g, m in zip(gpus, modes, strict=True) if m.lower() == "disabled"]
    if all(m.startswith("[") or m.lower() in ("n/a", "") for m in modes):
        return skipped(LAYER, "ecc mode", n.name, "the GPUs do not report an ECC mode")
    return verdict(
        not off,
        LAYER,
        "ecc mode",
        n.name,
        ", ".join(sorted(set(modes))),
        "Enabled",
        f"ECC is off on GPU {', '.join(off)}: nvidia-smi -e 1, then reset the GPU or reboot",
    )


def ecc_errors(ctx: Context) -> list[Check]:
    text = ctx.metrics()
    if text is None:
        return []
    dbe: dict[str, float] = {}
    try:
        samples = parse_prometheus(text)
    except ValueError:  # the monitoring layer reports an unparsable exposition
        return []
    for name, labels, value in samples:
        if name == "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL":
            host = labels.get("Hostname", "")
            dbe[host] = dbe.get(host, 0.0) + value
    out = []
    for n in ctx.nodes:
        if n.name in dbe:
            v = dbe[n.name]
            out.append(
                verdict(
                    v == 0,
                    LAYER,
                    "ecc errors",
                    n.name,
                    f"{v:g} double-bit",
                    "0",
                    "uncorrectable memory errors: drain the node, reset the GPU; replace it if "
                    "they come back (row remapping failures)",
                )
            )
    return out


def dcgm(ctx: Context, results: dict[str, dict[str, Any]]) -> list[Check]:
    out, skips = [], {}
    for node, res in results.items():
        d = section(res, "gpu", "dcgm")
        if not d.get("ran"):
            skips[node] = f"dcgmi diag not run: {d.get('why') or d.get('error') or 'unknown'}"
            continue
        bad = d.get("failed") or ([d["error"]] if d.get("error") else [])
        out.append(
            verdict(
                not bad,
                LAYER,
                f"dcgmi diag -r {d.get('level')}",
                node,
                f"{d.get('passed', 0)} passed, {len(bad)} failed",
                "all pass",
                "; ".join(bad)[:500] + " (dcgmi diag -r 3 for detail)",
            )
        )
    return out + grouped_skips(LAYER, "dcgmi diag", skips)


def compute(ctx: Context, results: dict[str, dict[str, Any]]) -> list[Check]:
    s = ctx.settings
    out, skips = [], {}
    models = {n.name: catalog.find(n.gpu_model) for n in ctx.nodes}
    for node, res in results.items():
        t = section(res, "gpu", "torch")
        devices = t.get("devices")
        if not devices:
            why = "PyTorch not installed" if not t.get("installed") else t.get("why", "no CUDA")
            skips[node] = f"compute and memory bandwidth not measured: {why}"
            continue
        m = models.get(node)
        ok = [d for d in devices if "bf16_tflops" in d]
        errors = [d["error"] for d in devices if "error" in d]
        if not ok:
            out.append(failed(LAYER, "compute", node, "no result", "a result", "; ".join(errors)))
            continue
        tf, bw = min(d["bf16_tflops"] for d in ok), min(d["copy_gbs"] for d in ok)
        if m is None:
            out.append(passed(LAYER, "compute", node, f"≥ {tf} TFLOPS bf16", "no catalog figure"))
            out.append(passed(LAYER, "memory bandwidth", node, f"≥ {bw} GB/s", "no catalog figure"))
            continue
        want_tf, want_bw = (
            s.min_tflops_fraction * m.bf16_tflops,
            s.min_membw_fraction * m.memory_bandwidth_gbs,
        )
        slow = [str(d["index"]) for d in ok if d["bf16_tflops"] < want_tf]
        out.append(
            verdict(
                not slow and not errors,
                LAYER,
                "compute",
                node,
                f"min {tf} TFLOPS bf16",
                f"≥ {want_tf:.0f} ({s.min_tflops_fraction:.0%} of {m.bf16_tflops:g})",
                f"GPU {', '.join(slow)} slow: clocks throttled (power cap, heat)? "
                f"nvidia-smi -q -d PERFORMANCE; {'; '.join(errors)}",
            )
        )
        slow = [str(d["index"]) for d in ok if d["copy_gbs"] < want_bw]
        out.append(
            verdict(
                not slow,
                LAYER,
                "memory bandwidth",
                node,
                f"min {bw} GB/s (device copy)",
                f"≥ {want_bw:.0f} ({s.min_membw_fraction:.0%} of {m.memory_bandwidth_gbs:g})",
                f"GPU {', '.join(slow)}: memory clock low or HBM degraded (nvidia-smi -q -d CLOCK)",
            )
        )
    return out + grouped_skips(LAYER, "compute and memory bandwidth", skips)


def checks(ctx: Context) -> list[Check]:
    out = inventory.checks(ctx.nodes, ctx.settings.cluster)
    targets = ctx.targets()
    for n, why in ctx.untargeted():
        if n.state != "lost":
            out.append(skipped(LAYER, "node probe", n.name, f"not probed: {why}"))
    if not targets:
        return out + ecc_errors(ctx)
    probe = ctx.node_probe()
    results = probe.results()
    ecc_rows: list[Check] = []
    for n in targets:
        res = results.get(n.name)
        if res is None:
            out.append(
                failed(LAYER, "node probe", n.name, "no result", "a result", probe.problem(n.name))
            )
            continue
        out += native_view(n, res)
        row = ecc(ctx, n, res)
        if row is not None:
            ecc_rows.append(row)
    if not ecc_rows:
        ecc_rows = [
            skipped(LAYER, "ecc mode", "cluster", "no node reports an ECC mode (no nvidia-smi)")
        ]
    out += ecc_rows + ecc_errors(ctx)
    out += dcgm(ctx, results)
    out += compute(ctx, results)
    return out
