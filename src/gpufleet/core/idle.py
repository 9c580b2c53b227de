"""The idle-GPU governor: samples of running jobs' GPU utilization in, warnings and actions out.

Pure like the rest of the core: the clock is the ``now`` each sample batch comes with. A job is
idle while the mean utilization of its GPUs over its queue policy's sliding window is under the
threshold (model/idle.py); its idle time runs from the first such sample and starts over at the
first sample that is not. Each warning passed is a job event (a Transition RUNNING → RUNNING
whose why says it, so ``gpufleet show`` lists it) and an ``IdleNotice`` for the site's hook; at
the action time the job is cancelled (JobCancelled's path, with a why that says so), requeued
(as a preemption is: not charged) or, under a warn-only policy, warned once more.

Exempt: the jobs of a queue whose policy says ``exempt`` (an interactive or debug queue), and,
for as long as it asked (``idle_exempt_s``, capped by the queue's ``exempt_max``), a job that
asked to be spared; its warnings still come, each saying when the action will be."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from gpufleet.core.cluster_state import ClusterState
from gpufleet.core.commands import Command, IdleNotice, Transition
from gpufleet.core.events import GpuUtilization, JobCancelled
from gpufleet.core.jobmaster import JobMaster
from gpufleet.model.idle import IdlePolicy
from gpufleet.model.job import JobState
from gpufleet.model.reason import Reason, ReasonCode
from gpufleet.model.resources import MILLI

S = JobState


@dataclass(slots=True)
class _Watch:
    attempt: int
    window: deque[tuple[float, float]] = field(default_factory=deque)  # (time, mean %)
    window_sum: float = 0.0
    idle_since: float | None = None
    last_idle_s: float = 0.0
    warned: int = 0
    acted: bool = False
    act_at: float = 0.0  # idle seconds at which the policy acts


def _minutes(s: float) -> str:
    return f"{s / 60:.0f} min" if s >= 60 else f"{s:.0f} s"


class IdleGovernor:
    def __init__(self, state: ClusterState, jobmaster: JobMaster) -> None:
        self.state = state
        self.jobmaster = jobmaster
        self.watched: dict[str, _Watch] = {}

    def reason(self, job_id: str) -> Reason | None:
        """A warned running job's Reason (code ``IdleGpus``), said afresh from its last sample:
        "idle: its 4 GPUs at 0 % for 62 min; warned at 60 min, cancelled at 120 min (queue
        vision's idle policy)"; None when not warned, and again once its GPUs are busy (the
        warnings then start over) or it ends."""
        w = self.watched.get(job_id)
        rec = self.jobmaster.jobs.get(job_id)
        if w is None or rec is None or not w.warned or w.idle_since is None or not w.window:
            return None
        spec = rec.job.spec
        q = self.state.queues.get(spec.queue)
        policy = q.idle if q is not None else None
        if policy is None:
            return None
        gpus = spec.workers * spec.gpus_per_worker
        util = round(w.window_sum / len(w.window), 1)
        warned = [t for t in policy.warn_after_s if t <= w.last_idle_s]
        then = {"cancel": "cancelled", "requeue": "requeued"}.get(policy.action)
        parts = [f"warned at {', '.join(_minutes(t) for t in warned)}"] if warned else []
        parts.append(
            f"{then} at {_minutes(w.act_at)}"
            if then
            else f"warned again at {_minutes(w.act_at)} (the policy only warns)"
        )
        if w.act_at > policy.act_after_s:
            parts[-1] += f", spared {_minutes(w.act_at - policy.act_after_s)} on its request"
        its = f"its {gpus} GPUs" if gpus != 1 else "its GPU"
        message = (
            f"idle: {its} at {util:g} % for {_minutes(w.last_idle_s)}; {', '.join(parts)} "
            f"(queue {spec.queue}'s idle policy)"
        )
        data = {
            "idle_s": round(w.last_idle_s, 1),
            "gpus": gpus,
            "util_pct": util,
            "warnings": w.warned,
            "act_at_s": w.act_at,
            "action": policy.action,
            "queue": spec.queue,
        }
        return Reason(ReasonCode.IDLE, message, data)

    def idle_seconds(self) -> dict[str, float]:
        """Each watched job's idle time at its last sample (0 while it is busy)."""
        return {jid: w.last_idle_s for jid, w in self.watched.items()}

    def observe(self, ev: GpuUtilization, now: float, out: list[Command]) -> None:
        jobs, queues = self.jobmaster.jobs, self.state.queues
        gpus: float | None = None  # the cluster's GPUs, counted once a charge needs them
        for jid, attempt, utils in ev.samples:
            rec = jobs.get(jid)
            if rec is None or rec.job.state is not S.RUNNING or rec.job.attempt != attempt:
                continue
            q = queues.get(rec.job.spec.queue)
            policy = q.idle if q is not None else None
            if policy is None or policy.exempt or not utils:
                self.watched.pop(jid, None)
                continue
            w = self.watched.get(jid)
            if w is None or w.attempt != attempt:
                w = self.watched[jid] = _Watch(attempt)
            before = w.window[-1][0] if w.window else None
            self._sample(w, policy, now, sum(utils) / len(utils))
            if w.idle_since is None:
                continue
            if policy.charge_idle > 0 and before is not None and before >= w.idle_since:
                if gpus is None:
                    gpus = float(sum(n.spec.gpus for n in self.state.nodes.values() if not n.lost))
                spec = rec.job.spec
                held = spec.workers * spec.gpus_per_worker * spec.gpu_milli / MILLI
                self._charge(spec.queue, held, gpus, (now - before) * policy.charge_idle)
            if w.acted:
                continue
            self._judge(jid, w, policy, now, out)
        running = self.state.running
        for jid in [j for j in self.watched if j not in running]:
            del self.watched[jid]  # ended or requeued: a new attempt starts afresh

    def _charge(self, queue: str, job_gpus: float, cluster_gpus: float, idle_s: float) -> None:
        """The queue's fair-share usage (share·s, as ``DecayedUsage`` keeps it) grows by the
        idle GPUs' share of the cluster over the idle time: its next jobs wait longer."""
        if cluster_gpus > 0:
            led = self.state.ledger.values
            led[queue] = led.get(queue, 0.0) + job_gpus / cluster_gpus * idle_s

    def _sample(self, w: _Watch, policy: IdlePolicy, now: float, mean: float) -> None:
        w.window.append((now, mean))
        w.window_sum += mean
        while len(w.window) > 1 and w.window[0][0] < now - policy.window_s:
            w.window_sum -= w.window.popleft()[1]
        if w.window_sum / len(w.window) < policy.threshold_pct:
            if w.idle_since is None:
                w.idle_since = now
            w.last_idle_s = now - w.idle_since
        else:  # busy again: the clock starts over, and so do the warnings
            w.idle_since, w.last_idle_s, w.warned = None, 0.0, 0

    def _judge(
        self, jid: str, w: _Watch, policy: IdlePolicy, now: float, out: list[Command]
    ) -> None:
        rec = self.jobmaster.jobs[jid]
        spec = rec.job.spec
        idle_s = w.last_idle_s
        act_at = policy.act_at_s(spec.idle_exempt_s)
        spared = act_at - policy.act_after_s
        passed = sum(1 for t in policy.warn_after_s if idle_s >= t)
        if idle_s >= act_at:
            w.acted = True
            what = {"cancel": "cancelled", "requeue": "requeued"}.get(policy.action, "")
            why = (
                f"idle GPUs: under {policy.threshold_pct:g} % for {_minutes(idle_s)} "
                f"(queue {spec.queue} acts at {_minutes(act_at)})"
            )
            why = f"{what}: {why}" if what else f"warning: {why}; the policy only warns"
            w.warned, w.act_at = max(w.warned, passed + 1), act_at
            self._notice(jid, w, policy, policy.action, passed + 1, idle_s, act_at, why, out)
            if policy.action == "cancel":
                self.jobmaster.cancel(JobCancelled(jid, why), now, out)
            elif policy.action == "requeue":
                self.jobmaster.evict(rec, why, now, out, "idle")
            else:
                out.append(Transition(jid, w.attempt, S.RUNNING, S.RUNNING, now, why))
            return
        if passed <= w.warned:
            return
        w.warned, w.act_at = passed, act_at
        verb = {"cancel": "cancelled", "requeue": "requeued"}.get(policy.action, "warned again")
        why = (
            f"warning {passed}: GPUs idle (under {policy.threshold_pct:g} %) for "
            f"{_minutes(idle_s)}; the job will be {verb} at {_minutes(act_at)} idle"
        )
        if spared:
            why += f" (spared {_minutes(spared)} on its request)"
        out.append(Transition(jid, w.attempt, S.RUNNING, S.RUNNING, now, why))
        self._notice(jid, w, policy, "warn", passed, idle_s, act_at, why, out)

    def _notice(
        self,
        jid: str,
        w: _Watch,
        policy: IdlePolicy,
        stage: str,
        n: int,
        idle_s: float,
        act_at: float,
        why: str,
        out: list[Command],
    ) -> None:
        spec = self.jobmaster.jobs[jid].job.spec
        out.append(
            IdleNotice(jid, spec.user, spec.queue, stage, n, idle_s, act_at, policy.action, why)
        )
