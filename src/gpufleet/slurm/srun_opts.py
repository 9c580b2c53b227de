"""srun's command line and input environment variables, as srun reads them: an option on the
command line over its ``SLURM_*`` input variable. What gpufleet's step cannot do is refused as
srun refuses a bad option; what would change nothing here is accepted with one warning."""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# srun options that ask for nothing a gpufleet step can honour differently: accepted, with one
# warning naming them (placement inside the allocation is block; binding is the node's)
IGNORED = _words(
    """
    --cpu-bind --cpu_bind --mem-bind --mem_bind --mem --mem-per-cpu --mem-per-gpu -t --time
    --time-min --exclusive --overlap --exact --whole -A --account -p --partition -q --qos
    --comment --gres-flags --gpu-bind --gpu-freq --cpu-freq --hint --threads-per-core --network
    --propagate --prolog --epilog --task-prolog --task-epilog --accel-bind --mcs-label
    --reservation --gres --gpus-per-node --mem-per-task --het-group -v --verbose -Q --quiet
    --slurmd-debug --kill-command --quit-on-interrupt -X --disable-status --no-allocate -Z
    --prefer --spread-job --switches --thread-spec --core-spec --cores-per-socket
    --sockets-per-node --ntasks-per-core --ntasks-per-socket --ntasks-per-gpu -B
    --extra-node-info --profile --acctg-freq --jobid --job-name-prefix --send-libs
    --tres-per-task --mail-type --mail-user --mincpus --msg-timeout --nice -d --dependency -I
    --immediate -k --no-kill --tmp --wckey -L --licenses --priority --signal --contiguous
    --deadline --delay-boot --resv-ports -G --gpus --cpus-per-gpu --test-only
    --cluster-constraint -M --clusters --container -H --hold -F --nodefile -s --oversubscribe
    --power --reboot --tres-bind --use-min-nodes --x11
    """
)
_FLAGS = _words(  # the ignored ones that take no value, or only an attached one (-I60)
    """
    --exclusive --overlap --exact --whole -v --verbose -Q --quiet --quit-on-interrupt -X
    --disable-status --no-allocate -Z --spread-job --send-libs -k --no-kill --contiguous
    --test-only -H --hold -s --oversubscribe --reboot --use-min-nodes -I --immediate --nice
    --resv-ports --x11
    """
)
# asked of a step gpufleet cannot give: srun's own refusal, with why
REFUSED = {
    "-i": "no input is forwarded to tasks: they read /dev/null",
    "--input": "no input is forwarded to tasks: they read /dev/null",
    "--pty": "no pseudo-terminal: gpufleet's srun relays no terminal (README, Coming from Slurm)",
    "-w": "a step runs on the job's nodes in order; -N picks how many (a nodelist is not kept)",
    "--nodelist": "a step runs on the job's nodes in order; -N picks how many",
    "-x": "a step runs on the job's nodes in order; -N picks how many",
    "--exclude": "a step runs on the job's nodes in order; -N picks how many",
    "-r": "a step runs on the job's first nodes; --relative is not kept",
    "--relative": "a step runs on the job's first nodes; --relative is not kept",
    "--multi-prog": "one program per step",
    "--het-job": "no heterogeneous steps",
    "-b": "srun only launches inside a job here",
    "--begin": "srun only launches inside a job here",
    "--bcast": "no file broadcast",
    "-D": "tasks run in srun's working directory",
    "--chdir": "tasks run in srun's working directory",
    "-C": "constraints are the job's (#SBATCH -C), not a step's",
    "--constraint": "constraints are the job's (#SBATCH -C), not a step's",
}


class SrunError(Exception):
    """A command line srun refuses; the message says what."""


@dataclass
class Options:
    ntasks: int | None = None
    nodes: int | None = None
    ntasks_per_node: int | None = None
    gpus_per_task: int | None = None
    cpus_per_task: int | None = None
    label: bool = False
    kill_on_bad_exit: bool = False
    unbuffered: bool = False
    export: str = "ALL"
    job_name: str = ""  # -J names the step; no task variable shows it (as in Slurm)
    wait_s: int = 0
    overcommit: bool = False
    distribution: str = "block"
    # where the tasks' stdout and stderr go (srun's -o/-e FILENAME patterns, "none", or a task
    # id: only that task's, to srun's own); None: to srun's own stdout and stderr
    output: str | None = None
    error: str | None = None
    append: bool = False  # --open-mode=append; else the files are truncated
    command: list[str] = field(default_factory=list)
    # which of ntasks/nodes/ntasks_per_node came from the command line (not the environment)
    explicit: set[str] = field(default_factory=set)
    warnings: list[str] = field(default_factory=list)


def _count(text: str, what: str, low: int = 1) -> int:
    if not re.fullmatch(r"\d+", text.strip()) or int(text) < low:
        raise SrunError(f"invalid {what} '{text}'")
    return int(text)


def _nodes(text: str) -> int:
    # srun takes a range min[-max]; a step uses the minimum
    lo, _, _hi = text.partition("-")
    return _count(lo, "node count")


def _gpus(text: str) -> int:
    # [type:]count, as --gpus-per-task takes it; the type is the job's
    return _count(text.rpartition(":")[2], "--gpus-per-task count", 0)


def _bool01(text: str) -> bool:
    if text not in ("0", "1"):
        raise SrunError(f"invalid --kill-on-bad-exit value '{text}' (0 or 1)")
    return text == "1"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="srun", add_help=False, allow_abbrev=False)
    p.add_argument("-n", "--ntasks")
    p.add_argument("-N", "--nodes")
    p.add_argument("--ntasks-per-node")
    p.add_argument("--gpus-per-task")
    p.add_argument("-c", "--cpus-per-task")
    p.add_argument("-l", "--label", action="store_true")
    p.add_argument("-u", "--unbuffered", action="store_true")
    p.add_argument("--export")
    p.add_argument("-J", "--job-name")
    p.add_argument("--mpi")
    p.add_argument("-W", "--wait")
    p.add_argument("-O", "--overcommit", action="store_true")
    p.add_argument("-m", "--distribution")
    p.add_argument("-o", "--output")
    p.add_argument("-e", "--error")
    p.add_argument("--open-mode")
    p.add_argument("-h", "--help", action="store_true")
    p.add_argument("--usage", action="store_true")
    p.add_argument("-V", "--version", action="store_true")
    p.add_argument("command", nargs=argparse.REMAINDER)
    return p


_WITH_VALUE = {
    "-n", "-N", "-c", "-J", "-W", "-m", "--ntasks", "--nodes", "--ntasks-per-node",
    "--gpus-per-task", "--cpus-per-task", "--export", "--job-name", "--mpi", "--wait",
    "--distribution", "-o", "-e", "--output", "--error", "--open-mode",
}  # fmt: skip


def _split(argv: Sequence[str]) -> tuple[list[str], list[str], str | None]:
    """Take out what argparse should not see: the ignored options (with their values) and
    -K (whose optional value must be attached: ``-K1``, ``--kill-on-bad-exit=0``). Stops at
    the command, the first word that is not an option."""
    keep: list[str] = []
    ignored: list[str] = []
    kill: str | None = None
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--" or not a.startswith("-") or a == "-":
            keep.extend(argv[i:])
            break
        long = a.startswith("--")
        name = a.split("=", 1)[0] if long else a[:2]
        attached = ("=" in a) if long else len(a) > 2
        if name in REFUSED:
            raise SrunError(f"option {name} is not supported here: {REFUSED[name]}")
        if name in ("-K", "--kill-on-bad-exit"):
            kill = (a.split("=", 1)[1] if long else a[2:]) if attached else "1"
            i += 1
            continue
        if name in IGNORED:
            ignored.append(name)
            i += 1 if attached or name in _FLAGS else 2
            continue
        keep.append(a)
        if a in _WITH_VALUE and i + 1 < len(argv):  # its value, whatever it looks like
            keep.append(argv[i + 1])
            i += 1
        i += 1
    return keep, ignored, kill


def parse(argv: Sequence[str], env: Mapping[str, str]) -> Options:
    keep, ignored, kill = _split(argv)
    p = _parser()
    try:
        ns, unknown = p.parse_known_args(keep)
    except SystemExit as e:  # argparse's own complaint went to stderr
        raise SrunError("bad command line (see above)") from e
    if unknown:
        raise SrunError(f"unrecognized option '{unknown[0]}'")
    o = Options()
    if ns.help or ns.usage:
        raise SrunError("help")
    if ns.version:
        raise SrunError("version")
    if ignored:
        o.warnings.append(
            "ignoring " + ", ".join(dict.fromkeys(ignored)) + " (a gpufleet step runs on the "
            "job's allocation as it is)"
        )

    def pick(cli: str | None, var: str, dest: str) -> str | None:
        if cli is not None:
            o.explicit.add(dest)
            return cli
        return env.get(var) or None

    if (v := pick(ns.ntasks, "SLURM_NTASKS", "ntasks")) is not None:
        o.ntasks = _count(v, "number of tasks")
    if (v := pick(ns.nodes, "SLURM_NNODES", "nodes")) is not None:
        o.nodes = _nodes(v)
    if (v := pick(ns.ntasks_per_node, "SLURM_NTASKS_PER_NODE", "ntasks_per_node")) is not None:
        o.ntasks_per_node = _count(v, "--ntasks-per-node")
    if (v := ns.gpus_per_task or env.get("SLURM_GPUS_PER_TASK")) is not None:
        o.gpus_per_task = _gpus(v)
    if (v := ns.cpus_per_task) is not None:
        o.cpus_per_task = _count(v, "--cpus-per-task")
    o.label = ns.label or env.get("SLURM_LABELIO", "") not in ("", "0")
    o.kill_on_bad_exit = _bool01(kill or env.get("SLURM_KILL_BAD_EXIT") or "0")
    o.unbuffered = ns.unbuffered or env.get("SLURM_UNBUFFEREDIO", "") not in ("", "0")
    o.export = ns.export or env.get("SLURM_EXPORT_ENV") or "ALL"
    o.job_name = ns.job_name or ""
    mpi = ns.mpi or env.get("SLURM_MPI_TYPE") or "none"
    if mpi != "none":
        raise SrunError(f"--mpi={mpi}: only --mpi=none (tasks wire themselves, e.g. torchrun)")
    if (w := ns.wait or env.get("SLURM_WAIT")) is not None:
        o.wait_s = _count(w, "--wait seconds", 0)
    o.overcommit = ns.overcommit or env.get("SLURM_OVERCOMMIT", "") not in ("", "0")
    dist = (ns.distribution or env.get("SLURM_DISTRIBUTION") or "block").split(":")[0]
    if dist not in ("block", "*"):
        raise SrunError(f"--distribution={dist}: only block is supported")
    o.output = ns.output or env.get("SLURM_STDOUTMODE") or None
    o.error = ns.error or env.get("SLURM_STDERRMODE") or None
    mode = ns.open_mode or env.get("SLURM_OPEN_MODE") or "truncate"
    if mode not in ("a", "append", "t", "truncate"):
        raise SrunError(f"Invalid --open-mode argument: {mode}. Ignored")
    o.append = mode in ("a", "append")
    command = list(ns.command)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        raise SrunError("no executable given")
    o.command = command
    return o
