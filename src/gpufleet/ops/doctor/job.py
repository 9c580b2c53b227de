"""``gpufleet doctor job JOB``: why a job failed (or waits), from its state, its events and its
logs, all read through the API. ``analyse`` is pure: a job and its ranks' logs in, findings out."""

from __future__ import annotations

import re

from gpufleet.api.schemas import JobOut
from gpufleet.client import ApiError, Client
from gpufleet.ops.doctor.finding import Finding, Severity, ok
from gpufleet.ops.doctor.signatures import match

MAX_LOG_CHARS = 512_000  # per stream: the tail is where failures are
_EXIT = re.compile(r"exited with code (\d+)|killed by (SIG\w+)")

WAIT_HINTS = {
    "Quota": "wait for the queue's jobs to finish, submit to a queue with room, or ask an admin "
    "for more quota (gpufleet queues)",
    "Resources": "it starts when capacity frees up; ask for fewer GPUs to start sooner",
    "Topology": "relax 'topology' (preferred instead of required, or a wider level)",
    "GpuModel": "allow more GPU models (gpu_models) or wait for the model asked for",
    "Priority": "jobs ahead of it wait for the same capacity; a higher priority moves it up",
    "Reserved": "capacity is held for an earlier large job; a shorter time_limit_s lets it "
    "backfill",
    "Preempting": "lower-priority jobs are being stopped to make room: it starts shortly",
    "Defragmenting": "smaller jobs are being moved off one leaf to make room for it: it starts "
    "once they have stopped",
    "NeverSchedulable": "it can never fit: ask for fewer GPUs per worker, fewer workers, or models "
    "the cluster has (gpufleet nodes)",
    "BackOff": "it failed and waits before its retry: read why with the logs of its last attempt",
    "BeginTime": "it was submitted to start no earlier than its begin time (sbatch --begin): it "
    "waits until then",
    "Dependency": "it waits for the job it depends on (gpufleet show that job)",
    "DependencyNeverSatisfied": "the job it depends on (afterok) did not succeed: it will never "
    "start; cancel it (scancel, gpufleet cancel) and submit it again if needed",
    "JobHeldUser": "it is held by its user (sbatch -H, scontrol hold): it starts only once "
    "released (scontrol release JOB, gpufleet release JOB)",
    "JobHeldAdmin": "an admin holds it (scontrol hold): only an admin may release it",
    "UserNotFoundOnHost": "its user needs a Unix account, with one UID, on the nodes (an admin: "
    "useradd, or the site's LDAP/SSSD); it starts once a node has it",
    "UserLookup": "the nodes are looking its user up: it starts once one has the account",
    "Held": "the job at the head of the order is blocked and this profile does not backfill",
}


IDLE_HINT = (
    "make the job use its GPUs, end it to free them, or ask to be spared for a while "
    "(idle_exempt_s, within the queue's limit)"
)


def read_logs(client: Client, job: JobOut) -> dict[int, tuple[str, str]]:
    """Each rank's (stdout, stderr) of the current attempt, their last MAX_LOG_CHARS each."""
    out = {}
    for rank in range(max(1, job.workers)):
        streams = []
        for stream in ("stdout", "stderr"):
            data, offset = "", 0
            try:
                while True:
                    page = client.logs(job.id, rank=rank, stream=stream, offset=offset)
                    data = (data + page.data)[-MAX_LOG_CHARS:]
                    if not page.data or page.next_offset == offset:
                        break
                    offset = page.next_offset
            except ApiError:
                pass
            streams.append(data)
        out[rank] = (streams[0], streams[1])
    return out


def diagnose(client: Client, job_id: str) -> list[Finding]:
    job = client.job(job_id)
    logs = read_logs(client, job) if job.start_time is not None or job.attempt > 0 else {}
    return analyse(job, logs)


def _last_why(job: JobOut, state: str) -> str:
    evs = [e for e in job.events or [] if e.state == state]
    return evs[-1].why if evs else ""


def state_findings(job: JobOut) -> list[Finding]:
    """What the job's state says, then the nodes it lost and its preemptions."""
    t = f"job {job.id}"
    state = _state_finding(job, t)
    return ([state] if state is not None else []) + _history_findings(job, t)


def _state_finding(job: JobOut, t: str) -> Finding | None:
    if job.state == "PENDING":
        r = job.reason
        if r is None:
            return None
        sev = Severity.ERROR if r.code == "NeverSchedulable" else Severity.INFO
        hint = WAIT_HINTS.get(r.code, "see the reason")
        return Finding(
            "scheduling", f"{r.code}: {r.message}", "the job is waiting", hint, sev, t, "pending"
        )
    if job.state == "RUNNING" and job.reason is not None and job.reason.code == "IdleGpus":
        r = job.reason
        return Finding(
            "idle GPUs",
            f"{r.code}: {r.message}",
            "its queue's idle-GPU policy warned it: its GPUs sit (nearly) unused",
            IDLE_HINT,
            Severity.WARNING,
            t,
            "idle_gpus",
        )
    if job.state == "TIMED_OUT":
        limit = job.spec.get("time_limit_s")
        return Finding(
            "time limit",
            _last_why(job, "TIMED_OUT") or f"TIMED_OUT after {limit} s",
            f"the job ran past its time limit ({limit:g} s)"
            if limit
            else "the job ran past its time limit",
            "raise time_limit_s (within the queue's limits), checkpoint regularly and resume "
            "with max_retries, or make it faster (more GPUs, larger batches)",
            Severity.ERROR,
            t,
            "time_limit",
        )
    if job.state == "CANCELLED":
        return Finding(
            "cancelled",
            _last_why(job, "CANCELLED") or "CANCELLED",
            "someone (or a dependency) cancelled it",
            "gpufleet audit shows who",
            Severity.INFO,
            t,
            "cancelled",
        )
    if job.state == "SUCCEEDED":
        why = _last_why(job, "SUCCEEDED") or "every rank exited 0"
        return ok("state", f"SUCCEEDED ({why})", t, "succeeded")
    if job.state in ("RUNNING", "STARTING"):
        return Finding(
            "state", job.state, "", "gpufleet logs -f to follow it", Severity.INFO, t, "running"
        )
    return None


def _history_findings(job: JobOut, t: str) -> list[Finding]:
    """The nodes lost under the job, and whether it was preempted."""
    out: list[Finding] = []
    for e in (e for e in job.events or [] if e.state == "NODE_LOST"):
        node = re.search(r"node (\S+)", e.why)
        name = node.group(1) if node else "N"
        out.append(
            Finding(
                "lost node",
                f"attempt {e.attempt}: {e.why}",
                "the node under a rank stopped answering (agent or node crashed, network cut) "
                "or failed its health checks; the job was requeued without using a retry",
                f"gpufleet doctor node {name}; it runs again elsewhere on its own",
                Severity.WARNING if job.state != "NODE_LOST" else Severity.ERROR,
                t,
                "node_lost",
            )
        )
    if any(e.state == "PREEMPTED" for e in job.events or []):
        out.append(
            Finding(
                "preempted",
                _last_why(job, "PREEMPTED"),
                "a job of higher priority (or a queue reclaiming its quota) took the GPUs",
                "set preemptible: false, or checkpoint so a preemption costs little",
                Severity.INFO,
                t,
                "preempted",
            )
        )
    return out


def exit_findings(job: JobOut, text_found: set[str]) -> list[Finding]:
    """What the exit status says (when the logs did not already say more)."""
    if job.state != "FAILED":
        return []
    why = _last_why(job, "FAILED")
    m = _EXIT.search(why)
    code = int(m.group(1)) if m and m.group(1) else None
    sig = m.group(2) if m and m.group(2) else None
    t = f"job {job.id}"
    mem = job.spec.get("memory_mib")
    mem_text = f"{mem / 1024:g} GiB" if isinstance(mem, int | float) else "its memory"
    if (
        (code == 137 or sig == "SIGKILL")
        and "time limit" not in why
        and "cuda_oom" not in text_found
    ):
        return [
            Finding(
                "exit status",
                f"{why} (exit 137 = SIGKILL)",
                "killed with SIGKILL by no one in gpufleet: the kernel's OOM killer (host memory "
                f"exhausted; the job asked for {mem_text} per worker), or an admin's kill -9",
                "check the node's kernel log (dmesg | grep -i oom); ask for more memory "
                "(memory_gib), use fewer data-loader workers, smaller prefetch or shared memory",
                Severity.ERROR,
                t,
                "oom_killer",
            )
        ]
    if code == 139 or sig == "SIGSEGV":
        return [
            Finding(
                "exit status",
                why,
                "a segmentation fault in native code (an extension, a "
                "driver library, or a library version mismatch)",
                "run it with "
                "PYTHONFAULTHANDLER=1 to see where; check the library versions on the node",
                Severity.ERROR,
                t,
                "segfault",
            )
        ]
    if code in (126, 127) and "not_executable" not in text_found:
        return [
            Finding(
                "exit status",
                why,
                "the command could not be run (not found or not executable)",
                "use an absolute path that exists on every node",
                Severity.ERROR,
                t,
                "not_executable",
            )
        ]
    return []


def refusal_findings(job: JobOut) -> list[Finding]:
    """A task the node's agent refused to start (no account for the job's user, a bad secret or
    container): the refusal is the cause, in the agent's words, and usually its fix after
    ``;``: said once, not repeated as an unknown failure."""
    why = _last_why(job, "FAILED") if job.state == "FAILED" else ""
    _, found, reason = why.partition("refused: ")
    if not found:
        return []
    cause, _, fix = reason.partition("; ")
    return [
        Finding(
            "launch refused",
            why,
            f"the node's agent refused to start the task: {cause}",
            fix or "fix what the refusal names on the node, then submit the job again",
            Severity.ERROR,
            f"job {job.id}",
            "launch_refused",
        )
    ]


def analyse(job: JobOut, logs: dict[int, tuple[str, str]]) -> list[Finding]:
    out = state_findings(job)
    by_code: dict[str, tuple[Finding, list[int]]] = {}
    for rank, (stdout, stderr) in sorted(logs.items()):
        for f in match(stdout + "\n" + stderr, target=f"job {job.id} rank {rank}"):
            if f.code in by_code:
                by_code[f.code][1].append(rank)
            else:
                by_code[f.code] = (f, [rank])
    for f, ranks in by_code.values():
        if len(ranks) > 1:
            f = Finding(
                f.check,
                f.seen,
                f.cause,
                f.next_step,
                f.severity,
                f"job {job.id} ranks {', '.join(map(str, ranks))}",
                f.code,
            )
        out.append(f)
    out += refusal_findings(job) or exit_findings(job, set(by_code))
    if job.state == "FAILED" and not any(f.severity is Severity.ERROR for f in out):
        why = _last_why(job, "FAILED") or "FAILED"
        tail = next(
            (e.strip().splitlines()[-1] for _, (_, e) in sorted(logs.items()) if e.strip()), ""
        )
        out.append(
            Finding(
                "failure",
                why + (f"; last stderr line: {tail[:200]}" if tail else ""),
                "no known failure signature in the logs",
                f"read the logs: gpufleet logs {job.id} --rank N --stderr",
                Severity.ERROR,
                f"job {job.id}",
                "unknown",
            )
        )
    return out
