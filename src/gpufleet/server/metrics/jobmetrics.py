"""``gpufleet_job_metric``: what each job reported of itself through its metrics file (the
agent reads ``$GPUFLEET_METRICS_FILE``: model/jobmetrics.py), one series per job and name,
for the jobs the controller still holds (running or ended)."""

from __future__ import annotations

from gpufleet.core.controller import Controller
from gpufleet.server.jobmetrics import JobMetricsBook
from gpufleet.server.metrics.gpus import job_pairs
from gpufleet.server.metrics.text import Family, LabelOf


def job_metric_families(
    book: JobMetricsBook, ctrl: Controller, lab: LabelOf, users: bool
) -> list[Family]:
    fam = Family(
        "gpufleet_job_metric",
        "gauge",
        "A job's own metric, as it last wrote it to its $GPUFLEET_METRICS_FILE (name value).",
    )
    for jid, r in book.items():
        rec = ctrl.jobs.get(jid)
        if rec is None:
            continue
        spec = rec.job.spec
        pairs = job_pairs(jid, spec.queue, spec.user, users)
        for name, value in r.values:
            fam.add(lab((*pairs, ("name", name))), value)
    return [fam]
