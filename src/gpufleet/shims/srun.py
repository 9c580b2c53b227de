"""``srun`` from a login node, outside any job: as Slurm 22.05's srun, it creates a job
allocation, runs one step of the tasks across it with their output on this terminal, and exits
with the step's exit code; the job ends with the step.

Inside a job (``SLURM_JOB_ID`` and ``GPUFLEET_STEP_HOSTS`` set) this is gpufleet's in-job srun
(``gpufleet.slurm.srun``) and nothing else. Outside one it reuses it, not a second path: the
allocation's options (``-N -n -c --gres --gpus* -p -t --mem* -J -A --qos -C --exclusive -w -x``)
become a batch job submitted as ``sbatch`` submits one (``POST /sbatch``), whose script runs the
in-job srun with the rest, so the step's environment, task layout, ``-l`` labels, ``-o``/``-e``
files, ``srun: error: NODE: task N: …`` lines and exit code are that srun's. Its stdout and
stderr are followed over the API (as ``gpufleet logs -f``) onto this srun's own.

What Slurm prints of the allocation (recorded in tests/e2e/slurm_printed/srun_outside.txt):
``srun: job N queued and waiting for resources`` and ``… has been allocated resources`` only when
the job could not start at once (here: the scheduler gave it a pending reason); ``-I`` gives up
then. Ctrl-C while it waits revokes the allocation; while it runs, each Ctrl-C goes on to the
step's srun in the job as SIGINT (``POST /jobs/{id}/signal``, ADR 0078), which answers as
Slurm's srun does: the first prints the tasks' states, a second within a second sends the tasks
SIGINT. ``--pty`` is refused: no terminal is relayed."""

from __future__ import annotations

import os
import shlex
import signal
import sys
import time

from gpufleet.shims.common import Usage, run

TYPE_CHECKING = False  # no typing at run time: a command starts on few imports (issue 27)
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any

    from gpufleet.client.lean import LeanClient


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# the allocation's options: to the job (sbatch's option of the same name), not the step
JOB_VALUE = _words(
    """
    -N --nodes -n --ntasks -c --cpus-per-task --ntasks-per-node --gres -G --gpus
    --gpus-per-node --gpus-per-task --cpus-per-gpu -p --partition -t --time --mem
    --mem-per-cpu --mem-per-gpu -J --job-name -A --account -q --qos -C --constraint
    -w --nodelist -x --exclude -D --chdir --begin --reservation --comment
    """
)
JOB_FLAG = frozenset(["--exclusive"])
PTY = (
    "--pty: gpufleet's srun relays no terminal, so it runs no interactive shell outside a job; "
    "run a command (srun … COMMAND), or submit a job and work in it over ssh or the desktop"
)
POLL_S = 0.5  # between looks at the job and its output: a second's latency at most
SIGINT_STEPS = {"signal": 2, "scope": "steps"}  # Ctrl-C, to the step's srun (ADR 0078)
PENDING = ("PENDING",)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if os.environ.get("SLURM_JOB_ID") and os.environ.get("GPUFLEET_STEP_HOSTS"):
        from gpufleet.slurm import srun as in_job

        return in_job.main(args)
    run("srun", lambda: allocate(args))
    return 1  # run() exits


class Request:
    """srun's command line cut in two: the job's options (as sbatch takes them), the step's
    (as the in-job srun takes them, its command last), and srun's own (-I)."""

    def __init__(self) -> None:
        self.job: list[str] = []
        self.step: list[str] = []
        self.immediate: float | None = None  # -I: seconds to wait at most (0: not at all)
        self.named = False
        self.command: list[str] = []


def split(argv: Sequence[str]) -> Request:
    """Which option goes where; the command starts at the first word that is not an option
    (or after ``--``). Usage when ``--pty`` or the step's options are refused by the in-job
    srun's own reader (checked here, before anything is submitted)."""
    from gpufleet.slurm import srun_opts

    step_value = srun_opts._WITH_VALUE | (srun_opts.IGNORED - srun_opts._FLAGS)
    r = Request()
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--" or not a.startswith("-") or a == "-":
            r.command = list(argv[i + 1 :] if a == "--" else argv[i:])
            break
        long = a.startswith("--")
        name = a.split("=", 1)[0] if long else a[:2]
        attached = ("=" in a) if long else len(a) > 2
        if name == "--pty":
            raise Usage(PTY)
        if name in ("-I", "--immediate"):
            value = (a.split("=", 1)[1] if long else a[2:]) if attached else "0"
            if not (value.isascii() and value.isdigit()):
                raise Usage(f"invalid --immediate value '{value}'")
            r.immediate = float(value)
            i += 1
            continue
        words = [a] if attached or name in JOB_FLAG else list(argv[i : i + 2])
        if name in JOB_VALUE or name in JOB_FLAG:
            r.job += words
            r.named = r.named or name in ("-J", "--job-name")
        elif name in step_value and not attached:
            r.step += words
        else:
            r.step.append(a)
            words = [a]
        i += len(words)
    if not r.command:
        raise Usage("no executable given")
    try:
        srun_opts.parse([*r.step, *r.command], {})
    except srun_opts.SrunError as e:
        raise Usage(str(e)) from None
    r.step += ["--", *r.command]
    return r


def script(r: Request) -> str:
    """The batch script: the in-job srun (first on a job's PATH) with the step's words."""
    return "exec srun " + shlex.join(r.step)


def sbatch_argv(r: Request) -> list[str]:
    name = [] if r.named else ["--job-name", os.path.basename(r.command[0]) or "srun"]
    # the output is followed here, not written to a slurm-N.out as a batch job's
    out = ["--output=/dev/null", "--error=/dev/null"]
    return [*r.job, *name, *out, "--wrap", script(r)]


def allocate(argv: Sequence[str]) -> int:
    from gpufleet.base.settings import SettingsError, resolve
    from gpufleet.client.errors import ApiError
    from gpufleet.client.lean import LeanClient
    from gpufleet.shims import sbatch

    r = split(argv)
    os.environ.update(sbatch.own_env())
    try:
        settings = resolve()
    except SettingsError as e:
        raise Usage(f"{e.message}" + (f" ({e.hint})" if e.hint else "")) from None
    body: dict[str, Any] = {"argv": sbatch_argv(r), "cwd": os.getcwd(), "host": sbatch._host()}
    body["environ"] = {k: v for k, v in os.environ.items() if not k.startswith(sbatch.NEVER_SENT)}
    with LeanClient(settings) as c:
        try:
            answer = sbatch._send(c, body)
        except ApiError as e:
            if e.status != 422:
                raise
            why = "; ".join(e.fields.values()) or str(e).removeprefix("422: ")
            raise Usage(f"Unable to allocate resources: {why}") from None
        except Usage as e:
            raise Usage(f"Unable to allocate resources: {e}") from None
        if answer is None:
            raise Usage("this gpufleet controller answers no POST /sbatch (too old for srun)")
        job = str(answer["ids"][0])
        return Follow(c, job, r.immediate).run()


class Follow:
    """The allocation's wait, then the step's output, then its exit code."""

    def __init__(self, c: LeanClient, job: str, immediate: float | None) -> None:
        self.c, self.job, self.immediate = c, job, immediate
        self.offsets = {"stdout": 0, "stderr": 0}
        self.interrupts: list[float] = []
        self.last_interrupt: float | None = None
        self.cancelled = False
        self.stop = False  # SIGTERM or SIGHUP: no second Ctrl-C asked for
        self.no_signal = False  # the controller has no signal call: Ctrl-C cancels

    def run(self) -> int:
        signal.signal(signal.SIGINT, lambda _n, _f: self.interrupts.append(time.monotonic()))
        for sig in (signal.SIGTERM, signal.SIGHUP):  # srun itself told to end: the job ends
            signal.signal(sig, lambda _n, _f: setattr(self, "stop", True))
        j = self.allocation()
        if j is None:
            return 1
        while True:
            wrote = self.pump()
            if self.ended(j):
                self.pump()  # what arrived between the two looks
                return self.exit_code(j)
            self.on_interrupts(pending=False)
            if not wrote:
                time.sleep(POLL_S)
            j = self.ask(self.c.job, self.job)

    def allocation(self) -> Any:
        """Wait until the job runs (or ended); None when it never will (-I, Ctrl-C, cancelled)."""
        said = False
        since = time.monotonic()
        while True:
            j: Any = self.ask(
                self.c.job, self.job
            )  # a Row: the server's JSON, read as a mapping too
            if j.state not in PENDING:
                if said:
                    err(f"job {self.job} has been allocated resources")
                return j
            reason = j.get("reason")  # the scheduler tried and could not place it
            waits = reason is not None
            if waits and self.immediate == 0:
                self.cancel()
                err(f"error: Unable to allocate resources: {busy(reason)}")
                return None
            if waits and not said:
                err(f"job {self.job} queued and waiting for resources")
                said = True
            if said and self.immediate and time.monotonic() - since >= self.immediate:
                self.cancel()
                err(f"error: Unable to allocate resources: {busy(reason)}")
                return None
            if self.interrupts or self.stop:
                self.cancel()
                err(f"Job allocation {self.job} has been revoked")
                return None
            time.sleep(POLL_S)

    def pump(self) -> bool:
        """Print what the job's script (the step's srun) wrote since the last look."""
        wrote = False
        for stream, out in (("stdout", sys.stdout), ("stderr", sys.stderr)):
            offset = self.offsets[stream]
            chunk = self.ask(self.c.logs, self.job, rank=0, stream=stream, offset=offset)
            if chunk.data:
                out.write(chunk.data)
                out.flush()
                wrote = True
            self.offsets[stream] = chunk.next_offset
        return wrote

    def on_interrupts(self, pending: bool) -> None:
        """As srun: each Ctrl-C goes to the step's srun in the job (ADR 0078), which does what
        Slurm's does (the first: the tasks' states; a second within a second: SIGINT to the
        tasks; a third: it gives up on them), its lines coming back with the step's output. A
        controller with no signal call: a Ctrl-C says how to abort, and a second within a
        second cancels the job (its tasks get SIGTERM, SIGKILL after the grace time)."""
        if self.stop and not self.cancelled:
            err(f"Job step aborted: cancelling job {self.job}")
            self.cancel()
        while self.interrupts:
            now = self.interrupts.pop(0)
            if self.cancelled or self.forwarded():
                continue
            if self.last_interrupt is not None and now - self.last_interrupt <= 1.0:
                err("forcing job termination")
                err(f"Job step aborted: cancelling job {self.job}")
                self.cancel()
                continue
            self.last_interrupt = now
            err("interrupt (one more within 1 sec to abort)")

    def forwarded(self) -> bool:
        """A Ctrl-C sent on to the job's step as SIGINT; False where the controller has no
        signal call (older: 404 or 405), which then is not asked again."""
        from gpufleet.client.errors import ApiError

        if self.no_signal:
            return False
        try:
            self.c.call("POST", f"/jobs/{self.job}/signal", json_body=SIGINT_STEPS)
        except ApiError as e:
            if e.status not in (404, 405):
                return e.status == 409  # it ended meanwhile: its end is seen next
            self.no_signal = True
            return False
        return True

    def cancel(self) -> None:
        self.cancelled = True
        self.ask(self.c.cancel, self.job)

    def ask(self, call: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        """``call``'s answer, asked again (each POLL_S) while the controller cannot answer:
        down, restarting, a standby taking over, as ``sbatch --wait`` rides them out; the job
        runs on meanwhile. Said once per outage."""
        from gpufleet.client.errors import ApiError
        from gpufleet.shims.sbatch_wait import RETRIED

        said = False
        while True:
            try:
                return call(*args, **kw)
            except (ApiError, OSError) as e:
                if isinstance(e, ApiError) and e.status not in RETRIED:
                    raise
                if self.stop or len(self.interrupts) >= 2:  # the user gives up waiting for it
                    raise
                if not said:
                    err(f"error: Currently unable to reach the controller, retrying: {e}")
                    said = True
            time.sleep(POLL_S)

    def ended(self, j: Any) -> bool:
        from gpufleet.shims.sbatch_wait import finished

        return bool(finished(j))

    def exit_code(self, j: Any) -> int:
        """The step's srun's exit code (the script's, which exec'd it); 128+signal when the job
        itself was ended by a signal (cancelled, past its time limit)."""
        end = j.get("ended")
        if end is None:
            return 0 if j.state == "SUCCEEDED" else 1
        if end.get("signal"):
            return 128 + int(end["signal"])
        return int(end.get("code") or 0)


def busy(reason: Any) -> str:
    """Slurm 22.05's -I refusal: behind jobs of higher priority, or not enough free nodes."""
    if reason.get("code") == "Priority":
        return "Immediate execution impossible, insufficient priority"
    return "Requested nodes are busy"


def err(msg: str) -> None:
    sys.stderr.write(f"srun: {msg}\n")
    sys.stderr.flush()


if __name__ == "__main__":
    sys.exit(main())
