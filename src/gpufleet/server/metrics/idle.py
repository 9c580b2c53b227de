"""The idle-GPU policy's gauge: how long each watched job's GPUs have sat idle (core/idle.py),
as of its last sample; 0 while they are busy. Only the jobs of queues with an idle policy."""

from __future__ import annotations

from gpufleet.core.controller import Controller
from gpufleet.server.metrics.gpus import job_pairs
from gpufleet.server.metrics.text import Family, LabelOf


def idle_families(ctrl: Controller, lab: LabelOf, users: bool = True) -> list[Family]:
    f = Family(
        "gpufleet_job_idle_seconds",
        "gauge",
        "Seconds a running job's GPUs have been idle under its queue's idle policy "
        "(DCGM_FI_DEV_GPU_UTIL under the policy's threshold over its window); 0 while busy.",
    )
    running = ctrl.running
    for jid, idle_s in sorted(ctrl.idle.idle_seconds().items()):
        r = running.get(jid)
        if r is not None:
            f.add(lab(job_pairs(jid, r.spec.queue, r.spec.user, users)), idle_s)
    return [f]
