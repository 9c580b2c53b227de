"""``scontrol`` where users log in: ``show job [ID]`` over the API, in scontrol's layout (the
lines people and tools read: JobState with its Reason, ExitCode, the times, NodeList);
``hold``, ``uhold`` and ``release`` of jobs (``scontrol_hold.py``); ``update JobId=…`` of a
job's fields and ``requeue`` of a running job (``scontrol_update.py``); anything else is the
in-job scontrol's (``gpufleet.slurm.scontrol``: ``show hostnames``).

Every line of Slurm 22.05's, in its order (``tests/e2e/test_shims_print_vs_slurm.py`` holds
what a real one printed and compares): the values gpufleet has; the rest as Slurm prints them
where it has no such thing (``Socks/Node=*``, ``Power=``).
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
from gpufleet.shims.common import connect, hms, iso, run, tres_mem

INVALID = "slurm_load_jobs error: Invalid job id specified"


def _blanks_out(why: str) -> str:
    """``Reason=``'s value as Slurm's scontrol prints a reason's description: each blank as
    ``_`` (``Nodes_required_for_job_are_DOWN,_DRAINED_…``), so that the line splits on blanks."""
    return "_".join(why.split(" "))


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


def _cpus(spec: Any) -> int:
    milli = spec.get("cpu_milli")
    cpus = milli / 1000 if milli is not None else float(spec.get("cpus", 1) or 1)
    return max(1, int(cpus + 0.999))


def _std(j: Any, nodes: list[str]) -> tuple[str, str, str]:
    """``StdErr``, ``StdIn`` and ``StdOut``: a batch job's files, their patterns expanded as
    scontrol expands them (``fname.shown``: ``%N`` and the rest kept) under its WorkDir."""
    from gpufleet.model.fname import FileFacts, shown

    spec = j.spec
    array, index = j.get("array_id"), j.get("array_index")
    if getattr(j, "tasks", None):  # an array's pending tasks in one record: no one task's
        index = None  # index, Slurm's NO_VAL for %a (StdOut=slurm-6_4294967294.out)
    default = "slurm-%A_%a.out" if array is not None else "slurm-%j.out"
    facts = FileFacts(str(j.id), slurm_style.job_name(j), j.user, nodes[0] if nodes else "%N",
                      array, index)  # fmt: skip

    def path(pattern: str) -> str:
        name = shown(pattern, facts)
        workdir = spec.get("workdir") or ""
        return name if name.startswith("/") or not workdir else f"{workdir}/{name}"

    out = path(spec.get("output") or default)
    err = path(spec.get("error")) if spec.get("error") else out
    return err, path(spec.get("input") or "/dev/null"), out


def _times(j: Any, now: float) -> tuple[float, str, str]:
    """RunTime's seconds, EligibleTime (Unknown while a dependency or a hold keeps it)
    and EndTime (a running job's time limit from its start, as Slurm's expected end)."""
    elapsed = 0.0
    if j.start_time is not None:
        end = j.end_time if j.end_time is not None and j.end_time >= j.start_time else now
        elapsed = end - j.start_time
    why = slurm_style.why(j)
    waits = j.state == "PENDING" and (why.startswith("Dependency") or why.startswith("JobHeld"))
    limit = j.spec.get("time_limit_s")
    ends = j.end_time
    if ends is None and j.start_time is not None and limit:
        ends = j.start_time + limit
    # sbatch --begin: eligible from then (Slurm's EligibleTime is the begin time)
    eligible = max(j.submit_time, float(j.spec.get("begin_time") or 0.0))
    return elapsed, "Unknown" if waits else iso(eligible), iso(ends)


def _held(placement: Any, cpus: int, mib: int) -> tuple[int, int]:
    """(CPUs, MiB) a placed job holds, as Slurm's NumCPUs and TRES count them: an --exclusive
    job its nodes' every CPU, a --mem=0 job their memory (Slurm 22.05: ``--exclusive -N 1`` on
    an 8-CPU node, NumCPUs=8 TRES=cpu=8,mem=16000M); before it is placed, what it asks for."""
    if not placement:
        return cpus, mib
    return (
        sum(max(1, -(-int(p.cpu_milli) // 1000)) for p in placement),
        sum(int(p.memory_mib) for p in placement),
    )


def job_lines(j: Any, now: float) -> list[str]:
    """One job as ``scontrol show job`` prints it: its ``key=value`` lines in Slurm 22.05's
    order (an array's pending tasks in one, ``ArrayTaskId=2-5``)."""
    nodes = list(dict.fromkeys(p.node for p in j.placement))
    user, group = _ids(j.user)
    spec = j.spec
    elapsed, eligible, ends = _times(j, now)
    limit = spec.get("time_limit_s")
    first = f"JobId={j.id}"
    if j.get("array_id") is not None and j.get("array_index") is not None:
        first += f" ArrayJobId={j.array_id} ArrayTaskId={slurm_style.array_index(j)}"
    per_worker = _cpus(spec)
    cpus = j.workers * per_worker
    # a worker is a node's tasks (-N 2 --ntasks-per-node=4 -c 2): Slurm counts the tasks and
    # each one's CPUs, and the node's CPUs as MinCPUsNode
    tasks = max(1, int(spec.get("tasks_per_worker", 1) or 1))
    mib = j.workers * int(spec.get("memory_mib", 0) or 0)
    count = len(nodes) or j.workers
    # --mem=0 (all of each node's): Slurm prints MinMemoryNode=0, without a unit
    node_mem = tres_mem(mib // max(1, j.workers)) if mib else "0"
    cpus, held = _held(j.placement, cpus, mib)
    tres = f"cpu={cpus},mem={tres_mem(held)},node={count},billing={cpus}"
    if j.gpus:
        tres += f",gres/gpu={j.gpus:g}"
    err, stdin, out = _std(j, nodes)
    lines = [
        f"{first} JobName={slurm_style.job_name(j)}",
        f"UserId={user} GroupId={group} MCS_label=N/A",
        f"Priority={slurm_style.priority(j)} Nice=0 Account={j.queue} QOS=(null)",
        f"JobState={slurm_style.CODES.get(j.state, ('', j.state))[1]} "
        f"Reason={_blanks_out(slurm_style.why(j))} Dependency={_dependency(j)}",
        f"Requeue={1 if spec.get('requeue', True) else 0} Restarts={max(0, j.attempt - 1)} "
        f"BatchFlag={1 if spec.get('batch') else 0} Reboot=0 "
        f"ExitCode={slurm_style.exit_code(j)}",
        f"RunTime={hms(elapsed)} TimeLimit={hms(limit) if limit else 'UNLIMITED'} TimeMin=N/A",
        f"SubmitTime={iso(j.submit_time)} EligibleTime={eligible}",
        f"AccrueTime={eligible}",
        # a pending job's: when it is expected to start (Slurm's backfill's; the plan's)
        f"StartTime={iso(slurm_style.start_of(j))} EndTime={ends} Deadline=N/A",
        "SuspendTime=None SecsPreSuspend=0 LastSchedEval=Unknown Scheduler=Main",
        f"Partition={slurm_style.partitions(j)} AllocNode:Sid=(null):0",
        f"ReqNodeList={','.join(spec.get('nodelist') or []) or '(null)'} "
        f"ExcNodeList={','.join(spec.get('exclude') or []) or '(null)'}",
        f"NodeList={ranged(nodes)}",  # empty while there are none, as Slurm's
        *([f"BatchHost={nodes[0]}"] if nodes else []),
        f"NumNodes={count} NumCPUs={cpus} NumTasks={j.workers * tasks} "
        f"CPUs/Task={max(1, per_worker // tasks)} "
        "ReqB:S:C:T=0:0:*:*",
        f"TRES={tres}",
        "Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=*",
        f"MinCPUsNode={per_worker} MinMemoryNode={node_mem} MinTmpDiskNode=0",
        f"Features={spec.get('constraint') or '(null)'} DelayBoot=00:00:00",
        f"OverSubscribe={'NO' if spec.get('exclusive') else 'OK'} Contiguous=0 "
        "Licenses=(null) Network=(null)",
        "Command=(null)",
        f"WorkDir={spec.get('workdir') or '(null)'}",
        f"StdErr={err}",
        f"StdIn={stdin}",
        f"StdOut={out}",
        "Power=",
    ]
    if j.gpus:
        lines.append(f"TresPerNode=gres:gpu:{int(spec.get('gpus_per_worker', 0) or j.gpus)}")
    return lines


def job_text(j: Any, now: float, one_line: bool = False) -> str:
    """One job as ``scontrol show job`` prints it: indented lines, then a line of three blanks
    and an empty one; with ``-o`` its fields on one line, a blank after each."""
    lines = job_lines(j, now)
    if one_line:
        return " ".join(lines) + " \n"
    return lines[0] + "\n" + "".join(f"   {x}\n" for x in lines[1:]) + "   \n\n"


def _shown(c: Any, j: Any) -> list[Any]:
    """What ``scontrol show job ID`` shows of ``ID``: the job, or for an array's id every
    task of it (those pending in one record, first, as Slurm's pending array record)."""
    if j.get("array_id") != j.id:
        return [j]
    tasks = sorted((t for t in c.all_jobs() if t.get("array_id") == j.id),
                   key=lambda t: (t.state != "PENDING", t.array_index))  # fmt: skip
    return slurm_style.one_line_arrays(tasks)


def _task(c: Any, jid: str) -> Any:
    """``ARRAY_N``: that task of the array (ApiError 404 when there is none)."""
    head, _, index = jid.partition("_")
    if index.isascii() and index.isdigit():
        for t in c.all_jobs():
            if t.get("array_id") == head and t.get("array_index") == int(index):
                return t
    raise ApiError(404, f"no job {jid}")


def show_jobs(ids: Sequence[str], one_line: bool = False) -> int:
    now = time.time()
    out: list[str] = []
    code = 0
    with connect("scontrol") as c:
        if not ids:
            jobs = sorted(c.all_jobs(), key=lambda j: (len(j.id), j.id))
            out += [job_text(j, now, one_line) for j in jobs]
        for jid in (x.strip() for i in ids for x in i.split(",") if x.strip()):
            try:
                shown = [_task(c, jid)] if "_" in jid else _shown(c, row(c.job(jid)))
            except ApiError as e:
                if e.status not in (400, 404, 422):
                    raise
                sys.stderr.write(f"{INVALID}\n")
                code = 1
                continue
            out += [job_text(j, now, one_line) for j in shown]
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
        one_line = any(a in ("-o", "--oneliner") for a in args)
        run("scontrol", lambda: show_jobs(ids, one_line))
    from gpufleet.shims import scontrol_nodes as nodes  # show node[s], show partition[s]

    if len(words) >= 2 and words[0] == "show" and words[1].lower() in nodes.WORDS:
        return nodes.main(args)
    if words and words[0].lower() in ("hold", "uhold", "release"):
        from gpufleet.shims import scontrol_hold

        scontrol_hold.main(words[0].lower(), words[1:])
    if words and words[0].lower() == "update":  # update JobId=… KEY=VALUE… (ADR 0076)
        from gpufleet.shims import scontrol_update

        scontrol_update.main(words[1:])
    if words and words[0].lower() == "requeue":  # requeue JOB_LIST (ADR 0076)
        from gpufleet.shims import scontrol_update

        scontrol_update.requeue_main(words[1:])
    from gpufleet.slurm.scontrol import main as in_job

    return in_job(args)


if __name__ == "__main__":
    sys.exit(main())
