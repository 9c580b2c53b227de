"""Layer 5, scheduling: a test job gets exactly the GPUs it asked for and sees only them.

A gang of two workers × k GPUs: each rank's placement holds k GPUs, its CUDA_VISIBLE_DEVICES
names k devices, the ones placed (by index or UUID), CUDA (where PyTorch and a driver are
present) counts k, and two ranks on one node share none. A CPU-only job sees no GPU."""

from __future__ import annotations

from gpufleet.api.schemas import NodeOut
from gpufleet.ops.probes import bundle
from gpufleet.ops.probes.common import split_devices
from gpufleet.ops.validate.checks import Check, failed, skipped, verdict
from gpufleet.ops.validate.context import Context
from gpufleet.ops.validate.jobs import ProbeRun

LAYER = "scheduler"
FIX = "the agent's device isolation is wrong: check its backend and CUDA_VISIBLE_DEVICES handling"


def names_placed(entries: list[str], gpus: list[int], node: NodeOut | None) -> bool:
    if entries == [str(g) for g in gpus]:
        return True
    uuids = {g.index: g.uuid for g in node.gpu_info} if node else {}
    return entries == [uuids.get(g, "?") for g in gpus]


def gpu_job_checks(ctx: Context, run: ProbeRun, k: int) -> list[Check]:
    if run.job is None or run.job.state != "SUCCEEDED" or not run.ranks:
        return [failed(LAYER, "gpu isolation", "cluster", "job failed", "SUCCEEDED", run.problem())]
    nodes = {n.name: n for n in ctx.nodes}
    out: list[Check] = []
    for r in run.ranks:
        target = f"job {run.job.id} rank {r.rank} on {r.node}"
        out.append(
            verdict(
                len(r.gpus) == k,
                LAYER,
                "gpus placed",
                target,
                f"{len(r.gpus)} ({r.gpus})",
                f"{k}",
                "the scheduler placed a different number of GPUs than the job asked for",
            )
        )
        v = (r.result or {}).get("visible") or {}
        entries = split_devices(v.get("cuda_visible_devices"))
        out.append(
            verdict(
                len(entries) == k and names_placed(entries, r.gpus, nodes.get(r.node)),
                LAYER,
                "gpus visible",
                target,
                f"CUDA_VISIBLE_DEVICES={v.get('cuda_visible_devices')!r}",
                f"{k} device(s): the placed {r.gpus}",
                FIX,
            )
        )
        if "torch_device_count" in v:
            out.append(
                verdict(
                    v["torch_device_count"] == k,
                    LAYER,
                    "cuda devices",
                    target,
                    f"torch.cuda.device_count() = {v['torch_device_count']}",
                    f"{k}",
                    FIX,
                )
            )
    per_node: dict[str, list[int]] = {}
    for r in run.ranks:
        per_node.setdefault(r.node, []).extend(r.gpus)
    shared = {n: g for n, g in per_node.items() if len(g) != len(set(g))}
    out.append(
        verdict(
            not shared,
            LAYER,
            "no shared gpus",
            f"job {run.job.id}",
            "disjoint" if not shared else str(shared),
            "each GPU to one rank",
            "two ranks were given the same GPU",
        )
    )
    return out


def cpu_job_checks(run: ProbeRun) -> list[Check]:
    if run.job is None or run.job.state != "SUCCEEDED" or not run.ranks:
        return [
            failed(
                LAYER, "cpu job sees no gpu", "cluster", "job failed", "SUCCEEDED", run.problem()
            )
        ]
    r = run.ranks[0]
    v = (r.result or {}).get("visible") or {}
    cvd = v.get("cuda_visible_devices")
    return [
        verdict(
            not split_devices(cvd) and cvd is not None,
            LAYER,
            "cpu job sees no gpu",
            f"job {run.job.id} on {r.node}",
            f"CUDA_VISIBLE_DEVICES={cvd!r}",
            "'' (no device)",
            FIX,
        )
    ]


def checks(ctx: Context) -> list[Check]:
    live = [n for n in ctx.nodes if n.state in ("idle", "mixed") and n.gpus > 0]
    if not live:
        return [skipped(LAYER, "gpu isolation", "cluster", "no node in service with GPUs")]
    most = max(n.gpus for n in live)
    k = max(1, min(ctx.settings.sched_gpus, most))
    workers = 2 if len(live) >= 2 or most >= 2 * k else 1
    cmd = bundle.command(ctx.settings.python, "node", ["--sections", "visible"])
    p = ctx.prober
    gpu_run, cpu_run = p.run_many(
        [
            ("sched-gpu", p.spec("validate-sched-gpu", cmd, workers=workers, gpus=k)),
            ("sched-cpu", p.spec("validate-sched-cpu", cmd, workers=1, gpus=0)),
        ]
    )
    return gpu_job_checks(ctx, gpu_run, k) + cpu_job_checks(cpu_run)
