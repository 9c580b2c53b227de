"""``scancel`` over gpufleet: job ids (an array's id, ``ID_N``), ``-u``, ``-n``, ``-t``,
``--me``; silent when it worked, as scancel is. As Slurm 22.05's, a job that has ended or that
no one knows is no error: nothing is said of it (but with ``-v``) and the exit status stays 0
(seen with ``/work/shared/tools/slurm_local.sh``: ``scancel 99999; echo $?`` prints 0)."""

from __future__ import annotations

import re

from gpufleet.cli import selection
from gpufleet.io import slurm_style
from gpufleet.model.limits import signal_number
from gpufleet.shims import scancel_signal
from gpufleet.shims.common import Usage, connect, error, run, users
from gpufleet.shims.parser import Parser

_JOB_ID = re.compile(r"[0-9]+(_[0-9]+)?")  # a job, or one task of an array (ID_N)


def parser() -> Parser:
    p = Parser("scancel", "Cancel gpufleet jobs as scancel does.")
    p.add_argument("job_ids", nargs="*", metavar="JOB_ID[_ARRAY_ID]")
    p.add_argument("-u", "--user", help="every job of this user")
    p.add_argument("--me", action="store_true", help="every job of mine (this Unix user's)")
    p.add_argument("-n", "--name", "--jobname", dest="name", help="jobs of these names")
    p.add_argument("-t", "--state", help="only jobs in these states: PD, R, …")
    p.add_argument("-s", "--signal", help="send this signal to the jobs, which go on running")
    p.add_argument("-b", "--batch", action="store_true", help="signal the batch shell alone")
    p.add_argument("-f", "--full", action="store_true", help="signal the batch shell and steps")
    p.add_argument("-Q", "--quiet", action="store_true", help="no error messages")
    p.add_argument(
        "-v", "--verbose", action="store_true", help="also name jobs that ended or are unknown"
    )
    return p


def main(argv: list[str] | None = None) -> None:
    a = parser().parse_args(argv)

    def body() -> int:
        sig = None
        if a.signal is not None:
            try:
                sig = signal_number(a.signal)
            except ValueError:
                return scancel_signal.unknown(a.signal)
            sig = None if sig == 9 and not a.batch else sig  # SIGKILL: a cancel, as Slurm's
        try:
            wanted = slurm_style.states(a.state) if a.state is not None else None
        except ValueError as e:
            raise Usage(f"--state: {e}") from None
        who = users(a.user, a.me)
        if who is not None and len(who) > 1:
            raise Usage("-u: one user at a time")
        user = next(iter(who)) if who else None
        ids = [i.strip() for x in a.job_ids for i in x.split(",") if i.strip()]
        for bad in (i for i in ids if not _JOB_ID.fullmatch(i)):
            job, dot, _ = bad.partition(".")
            if dot and _JOB_ID.fullmatch(job):
                raise Usage(f"{bad}: gpufleet cannot cancel one step of a job (scancel {job})")
            raise Usage(f"Invalid job id {bad}")  # scancel's own words, exit 1
        if not ids and user is None and a.name is None and a.state is None:
            raise Usage("No job identification provided")
        with connect("scancel") as c:
            if sig is not None:
                say = (lambda _m: None) if a.quiet else (lambda m: error("scancel", m))
                jobs = scancel_signal.chosen(c, ids, user, a.name, wanted)
                scope = scancel_signal.scope_of(a.batch, a.full)
                return scancel_signal.signal_jobs(c, jobs, sig, scope, say)

            def report(msg: str) -> None:
                if not a.quiet:
                    error("scancel", f"Kill job error on {msg}")

            def gone(msg: str) -> None:
                if a.verbose and not a.quiet:
                    error("scancel", f"Kill job error on {msg}")

            _, failed = selection.cancel(
                c,
                ids,
                user=user,
                names=a.name,
                wanted=wanted,
                any_state=a.state is not None,
                report=report,
                gone=gone,
            )
        return 1 if failed else 0

    run("scancel", body)


if __name__ == "__main__":
    main()
