"""Step 2 asks a third-party admit plugin about every job: the shortcut that skips the call for
a queue without a quota holds only for a plugin that says ``admits_unlimited`` (``AdmitBase``
says it does not)."""

from __future__ import annotations

from dataclasses import replace

from builders import cluster, job, profile, snapshot

from gpufleet.model.reason import Reason, ReasonCode
from gpufleet.scheduler.cycle import run_cycle
from gpufleet.scheduler.framework import ADMITTED, Admission, Code, Status
from gpufleet.scheduler.plugins.base import AdmitBase
from gpufleet.scheduler.snapshot import PendingJob
from gpufleet.scheduler.usage import QueueUsage


class OnlyAlice(AdmitBase):
    """An admit plugin of a site's own: jobs of user alice only, whatever the queue's quota."""

    def admit(self, job: PendingJob, usage: QueueUsage) -> Admission:
        if job.spec.user == "alice":
            return ADMITTED
        return Admission(Status(Code.UNSCHEDULABLE, Reason(ReasonCode.QUOTA, "alice only")))


class OnlyAliceUnlimited(OnlyAlice):
    admits_unlimited = True  # a promise this plugin breaks: the cycle may skip asking


def _cycle(plugin: object) -> tuple[list[str], dict[str, str]]:
    pending = [job("a1", gpus=8, user="alice", submit=0), job("b1", gpus=8, user="bob", submit=1)]
    prof = replace(profile(), admit=plugin)
    res = run_cycle(snapshot(cluster(4, 8), pending), prof)
    return [s.job_id for s in res.starts], {k: r.message for k, r in res.reasons.items()}


def test_a_plugin_without_the_flag_is_asked_for_a_queue_without_quota() -> None:
    started, reasons = _cycle(OnlyAlice())
    assert started == ["a1"]
    assert reasons["b1"] == "alice only"


def test_a_plugin_that_says_admits_unlimited_is_not_asked() -> None:
    started, _ = _cycle(OnlyAliceUnlimited())
    assert started == ["a1", "b1"]
