"""Layer 6, application: a sample distributed job runs end to end through the scheduler: the
repository's DDP training example (``ddp_train.py``, gloo) where PyTorch is on every node,
else the plain gang (``gang_hello.py``); across two whole nodes when two are idle. A failure is
explained with ``gpufleet doctor``'s log signatures."""

from __future__ import annotations

import time

from gpufleet.ops.doctor.signatures import match
from gpufleet.ops.probes import bundle
from gpufleet.ops.validate.checks import Check, failed, passed, skipped
from gpufleet.ops.validate.common import section
from gpufleet.ops.validate.context import Context

LAYER = "application"


def torch_everywhere(ctx: Context) -> bool | None:
    """Is PyTorch on every probed node (None: not known, the node probe did not run)?"""
    if not ctx.targets():
        return None
    results = ctx.node_probe().results()
    if not results:
        return None
    return all(section(r, "gpu", "torch").get("installed") for r in results.values())


def checks(ctx: Context) -> list[Check]:
    live = [n for n in ctx.nodes if n.state in ("idle", "mixed")]
    if not live:
        return [skipped(LAYER, "sample job", "cluster", "no node in service")]
    app = ctx.settings.app
    torch = torch_everywhere(ctx) if app == "auto" else app == "ddp"
    program = "ddp_train.py" if torch else "gang_hello.py"
    idle = ctx.targets()
    if len(idle) >= 2:
        gpus = min(n.gpus for n in idle[:2]) if all(n.gpus for n in idle[:2]) else 0
        # whole nodes where all idle nodes are alike, so the gang crosses nodes
        gpus = gpus if len({n.gpus for n in idle}) == 1 else 1
    else:
        gpus = 1 if any(n.gpus for n in live) else 0
    cmd = bundle.example_command(ctx.settings.python, program)
    spec = ctx.prober.spec("validate-app", cmd, workers=2, gpus=gpus, cpus=1, memory_gib=2)
    t0 = time.monotonic()
    run = ctx.prober.run("app", spec)
    took = time.monotonic() - t0
    job = run.job
    where = ", ".join(sorted({r.node for r in run.ranks})) or "cluster"
    if job is not None and job.state == "SUCCEEDED":
        out0 = run.ranks[0].stdout.strip().splitlines() if run.ranks else []
        line = out0[-1] if out0 else ""
        want = "WORLD_SIZE=2"
        if want not in line:
            return [
                failed(
                    LAYER,
                    f"sample job ({program})",
                    where,
                    line or "no output",
                    want,
                    "rank 0 printed no result",
                )
            ]
        return [
            passed(
                LAYER,
                f"sample job ({program})",
                where,
                f"SUCCEEDED in {took:.0f} s: {line}",
                "SUCCEEDED",
            )
        ]
    text = "\n".join(r.stdout + "\n" + r.stderr for r in run.ranks)
    found = match(text)
    why = "; ".join(f"{f.cause} → {f.next_step}" for f in found[:2]) or run.problem()
    state = job.state if job else "not run"
    note = "" if torch is not None else " (PyTorch presence unknown: the node probe did not run)"
    return [failed(LAYER, f"sample job ({program})", where, state, "SUCCEEDED", why + note)]
