"""``scontrol`` where users log in: ``show job [ID]`` over the API, in scontrol's layout (the
lines people and tools read: JobState with its Reason, ExitCode, the times, NodeList);
``hold``, ``uhold`` and ``release`` of jobs (``scontrol_hold.py``); anything else is the
in-job scontrol's (``gpufleet.slurm.scontrol``: ``show hostnames``).

What a real Slurm 22.05 printed for a batch script that exited 3 (slurm_local.sh), the lines
kept here::

    JobId=1 JobName=wrap
       UserId=root(0) GroupId=root(0) MCS_label=N/A
       Priority=4294901759 Nice=0 Account=(null) QOS=(null)
       JobState=FAILED Reason=NonZeroExitCode Dependency=(null)
       Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=3:0
       RunTime=00:00:00 TimeLimit=UNLIMITED TimeMin=N/A
       SubmitTime=2026-12-06T21:59:24 EligibleTime=2026-12-06T21:59:24
       StartTime=2026-12-06T21:59:25 EndTime=2026-12-06T21:59:25 Deadline=N/A
       Partition=gpu AllocNode:Sid=localhost:12766
       NodeList=n1
       NumNodes=1 NumCPUs=1 NumTasks=1 CPUs/Task=1 ReqB:S:C:T=0:0:*:*
       WorkDir=/tmp/slurm-ux/jobs
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import Any

from gpufleet.client.errors import ApiError
from gpufleet.client.lean import row
from gpufleet.io import slurm_style
from gpufleet.model.hostlist import ranged
from gpufleet.shims.common import connect, hms, iso, run

INVALID = "slurm_load_jobs error: Invalid job id specified"


def _ids(user: str) -> tuple[str, str]:
    """``UserId=`` and ``GroupId=`` as scontrol prints them: ``name(number)``."""
    import grp
    import pwd

    try:
        pw = pwd.getpwnam(user)
    except KeyError:
        return user, "(null)"
    try:
        group = grp.getgrgid(pw.pw_gid).gr_name
    except KeyError:
        group = str(pw.pw_gid)
    return f"{user}({pw.pw_uid})", f"{group}({pw.pw_gid})"


def _dependency(j: Any) -> str:
    """``Dependency=``: a pending job's dependencies not met yet, as its Reason's data has them
    (``afterok:1(unfulfilled)``, ``afterok:1(failed)``: one that can never be met); ``(null)``
    when none is left (Slurm drops those met). A job that ended pending (cancelled) keeps
    those not met then, as Slurm 22.05 does; one that ran, ``(null)``."""
    if j.state != "PENDING":
        ended = j.get("ended")
        return (ended.get("dependency") if ended else "") or "(null)"
    reason = j.get("reason")
    deps = (reason.get("data") or {}).get("dependency") if reason else None
    return ",".join(deps) if deps else "(null)"


def job_text(j: Any, now: float) -> str:
    """One job as ``scontrol show job`` prints it, its blank line after."""
    nodes = list(dict.fromkeys(p.node for p in j.placement))
    user, group = _ids(j.user)
    spec = j.spec
    elapsed = 0.0
    if j.start_time is not None:
        end = j.end_time if j.end_time is not None and j.end_time >= j.start_time else now
        elapsed = end - j.start_time
    limit = spec.get("time_limit_s")
    first = f"JobId={j.id}"
    if j.get("array_id") is not None and j.get("array_index") is not None:
        first += f" ArrayJobId={j.array_id} ArrayTaskId={j.array_index}"
    cpus = j.workers * int(float(spec.get("cpus", 1) or 1) + 0.999)
    lines = [
        f"{first} JobName={j.name}",
        f"UserId={user} GroupId={group} MCS_label=N/A",
        f"Priority={slurm_style.priority(j)} Nice=0 Account={j.queue} QOS=(null)",
        f"JobState={slurm_style.CODES.get(j.state, ('', j.state))[1]} Reason={slurm_style.why(j)} "
        f"Dependency={_dependency(j)}",
        f"Requeue={1 if spec.get('requeue', True) else 0} Restarts={max(0, j.attempt - 1)} "
        f"BatchFlag={1 if spec.get('batch') else 0} Reboot=0 "
        f"ExitCode={slurm_style.exit_code(j)}",
        f"RunTime={hms(elapsed)} TimeLimit={hms(limit) if limit else 'UNLIMITED'} TimeMin=N/A",
        f"SubmitTime={iso(j.submit_time)} EligibleTime={iso(j.submit_time)}",
        f"StartTime={iso(j.start_time)} EndTime={iso(j.end_time)} Deadline=N/A",
        f"Partition={slurm_style.partitions(j)}",
        f"NodeList={ranged(nodes) if nodes else '(null)'}",
        f"NumNodes={len(nodes) or j.workers} NumCPUs={cpus} NumTasks={j.workers}",
    ]
    if spec.get("workdir"):
        lines.append(f"WorkDir={spec.get('workdir')}")
    return lines[0] + "\n" + "".join(f"   {x}\n" for x in lines[1:]) + "\n"


def show_jobs(ids: Sequence[str]) -> int:
    now = time.time()
    out: list[str] = []
    code = 0
    with connect("scontrol") as c:
        if not ids:
            jobs = sorted(c.all_jobs(), key=lambda j: (len(j.id), j.id))
            out += [job_text(j, now) for j in jobs]
        for jid in (x.strip() for i in ids for x in i.split(",") if x.strip()):
            try:
                out.append(job_text(row(c.job(jid)), now))
            except ApiError as e:
                if e.status not in (400, 404, 422):
                    raise
                sys.stderr.write(f"{INVALID}\n")
                code = 1
    sys.stdout.write("".join(out))
    return code


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    words = [a for a in args if not a.startswith("-")]
    if len(words) >= 2 and words[0] == "show" and words[1].lower() in ("job", "jobs", "jobid"):
        if len(words) > 3:
            sys.stderr.write("scontrol: error: show job takes one job id (or a comma list)\n")
            return 1
        ids = words[2:]
        run("scontrol", lambda: show_jobs(ids))
    if words and words[0].lower() in ("hold", "uhold", "release"):
        from gpufleet.shims import scontrol_hold

        scontrol_hold.main(words[0].lower(), words[1:])
    from gpufleet.slurm.scontrol import main as in_job

    return in_job(args)


if __name__ == "__main__":
    sys.exit(main())
