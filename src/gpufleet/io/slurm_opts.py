"""sbatch's options as sbatch itself reads them: its option table and glibc's getopt_long.

The table is sbatch's (Slurm 24.x ``src/common/slurm_opt.c``: every option whose setter applies
to sbatch, with its short letter and whether it takes a value), written out here as data. The
reading follows getopt_long in sbatch's ``+`` mode:

- ``--name=value`` and ``--name value`` for an option that needs a value; an optional value only
  in the ``--name=value`` form (``--nice 5`` is ``--nice`` and a stray word ``5``);
- a long name may be shortened to any prefix that names one option (``--part`` is
  ``--partition``, ``--tasks`` is ``--tasks-per-node``); an exact name wins over longer ones
  (``--mem`` is not ``--mem-per-cpu``); a prefix shared by different options is refused as
  ambiguous (``--ntasks-per`` could be ``--ntasks-per-node`` or ``--ntasks-per-gpu``);
- short letters bundle and take attached values (``-N2``, ``-HJname``, ``-n 4``);
- reading stops at the first word that is not an option, and sbatch refuses that word.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

ArgKind = Literal["required", "optional", "none"]


@dataclass(frozen=True, slots=True)
class Option:
    name: str  # the long name, without "--"
    short: str | None  # the short letter, if any
    arg: ArgKind
    key: str  # the option it sets: an alias (tasks-per-node) sets its target (ntasks-per-node)


def _table(rows: str) -> tuple[Option, ...]:
    kinds: dict[str, ArgKind] = {"r": "required", "o": "optional", "n": "none"}
    out = []
    for row in rows.strip().splitlines():
        name, short, arg, *key = row.split()
        out.append(Option(name, None if short == "-" else short, kinds[arg], (key or [name])[0]))
    return tuple(out)


# name, short letter ("-": none), argument (r: required, o: optional, n: none), [option it sets].
# With them NVIDIA pyxis's (a SPANK plugin that adds them to sbatch where it is installed):
# container-entrypoint … container-writable and no-container-*; gpufleet acts on
# container-image, container-mounts and container-workdir.
OPTIONS: tuple[Option, ...] = _table("""
account A r
acctg-freq - r
array a r
autocomplete - r
batch - r
bb - r
bbf - r
begin b r
chdir D r
cluster - r clusters
cluster-constraint - r
clusters M r
comment - r
constraint C r
container - r
container-id - r
container-entrypoint - n
container-env - r
container-image - r
container-mount-home - n
container-mounts - r
container-name - r
container-readonly - n
container-remap-root - n
container-save - r
container-workdir - r
container-writable - n
context - r
contiguous - n
core-spec S r
cores-per-socket - r
cpu-freq - r
cpus-per-gpu - r
cpus-per-task c r
deadline - r
delay-boot - r
dependency d r
distribution m r
error e r
exclude x r
exclusive - o
export - r
export-file - r
extra - r
extra-node-info B r
get-user-env - o
gid - r
gpu-bind - r
gpu-freq - r
gpus G r
gpus-per-node - r
gpus-per-socket - r
gpus-per-task - r
gres - r
gres-flags - r
help h n
hint - r
hold H n
ignore-pbs - n
input i r
job-name J r
kill-on-invalid-dep - r
licenses L r
mail-type - r
mail-user - r
mcs-label - r
mem - r
mem-bind - r
mem-per-cpu - r
mem-per-gpu - r
mincpus - r
network - r
nice - o
no-kill k o
no-requeue - n
no-container-entrypoint - n
no-container-mount-home - n
no-container-remap-root - n
nodefile F r
nodelist w r
nodes N r
ntasks n r
ntasks-per-core - r
ntasks-per-gpu - r
ntasks-per-node - r
ntasks-per-socket - r
ntasks-per-tres - r
oom-kill-step - o
open-mode - r
output o r
overcommit O n
oversubscribe s n
parsable - n
partition p r
prefer - r
priority - r
profile - r
propagate - o
qos q r
quiet Q n
reboot - n
requeue - n
reservation - r
segment - r
signal - r
sockets-per-node - r
spread-job - n
stepmgr - n
switches - r
tasks-per-node - r ntasks-per-node
test-only - n
thread-spec - r
threads-per-core - r
time t r
time-min - r
tmp - r
tres-bind - r
tres-per-task - r
uid - r
usage - n
use-min-nodes - n
verbose v n
version V n
wait W n
wait-all-nodes - r
wckey - r
wrap - r
""")
BY_NAME: dict[str, Option] = {o.name: o for o in OPTIONS}
BY_SHORT: dict[str, Option] = {o.short: o for o in OPTIONS if o.short}


@dataclass(frozen=True, slots=True)
class Word:
    text: str
    line: int  # where it was read (0: the command line)


@dataclass(frozen=True, slots=True)
class Given:
    """One option as given: which, its value (None: given without one), where, as written."""

    option: Option
    value: str | None
    line: int
    text: str  # "--gres=gpu:4", "-N 2": for messages


@dataclass(frozen=True, slots=True)
class Problem:
    line: int
    message: str


# Options older sbatch took, which public scripts still carry: what to write now.
REMOVED = {
    "workdir": "removed in Slurm 17.11: use --chdir",
    "share": "the old name of --oversubscribe",
    "checkpoint": "checkpointing was removed from Slurm",
    "checkpoint-dir": "checkpointing was removed from Slurm",
    "power": "removed in Slurm 23.11",
    "jobid": "sbatch no longer takes a job id",
}


def _hint(key: str) -> str:
    """A short pointer for an unknown option: what replaced it, or the option it is close to
    (glibc's message comes first, unchanged)."""
    name = key.partition("=")[0]
    if name in REMOVED:
        return f" ({REMOVED[name]})"
    import difflib  # only for a mistyped option

    close = difflib.get_close_matches(name, BY_NAME, n=1, cutoff=0.8)
    return f" (did you mean --{close[0]}?)" if close else ""


def find_long(key: str) -> tuple[Option | None, str]:
    """The option ``--key`` names (an exact name, or a prefix of one option), or a reason."""
    if key in BY_NAME:
        return BY_NAME[key], ""
    matches = [o for o in OPTIONS if o.name.startswith(key)]
    if not matches:
        return None, f"unrecognized option '--{key}'{_hint(key)}"
    first = matches[0]
    # glibc: candidates that all set the same thing the same way are one option
    if all((o.key, o.arg) == (first.key, first.arg) for o in matches):
        return first, ""
    names = " ".join(f"'--{o.name}'" for o in matches)
    return None, f"option '--{key}' is ambiguous; possibilities: {names}"


def getopt(words: Sequence[Word]) -> tuple[list[Given], list[Problem], int]:
    """(options in order, problems, index of the first word that is not an option)."""
    given: list[Given] = []
    problems: list[Problem] = []
    i = 0
    while i < len(words):
        w = words[i]
        t = w.text
        if t == "--":
            return given, problems, i + 1
        if not t.startswith("-") or t == "-":
            break  # "+" mode: the first non-option ends the options
        nxt = words[i + 1] if i + 1 < len(words) else None
        if t.startswith("--"):
            key, eq, value = t[2:].partition("=")
            opt, why = find_long(key)
            if opt is None:
                problems.append(Problem(w.line, why if not eq else why.replace(key, t[2:], 1)))
            elif opt.arg == "none":
                if eq:
                    problems.append(
                        Problem(w.line, f"option '--{opt.name}' doesn't allow an argument")
                    )
                else:
                    given.append(Given(opt, None, w.line, t))
            elif eq:
                given.append(Given(opt, value, w.line, t))
            elif opt.arg == "optional":
                given.append(Given(opt, None, w.line, t))
            elif nxt is not None:
                given.append(Given(opt, nxt.text, w.line, f"{t} {nxt.text}"))
                i += 1
            else:
                problems.append(Problem(w.line, f"option '--{opt.name}' requires an argument"))
            i += 1
            continue
        j = 1
        while j < len(t):
            c = t[j]
            opt = BY_SHORT.get(c)
            if opt is None:
                problems.append(Problem(w.line, f"invalid option -- '{c}'"))
                j += 1
                continue
            if opt.arg == "none":
                given.append(Given(opt, None, w.line, f"-{c}"))
                j += 1
                continue
            rest = t[j + 1 :]
            if rest or opt.arg == "optional":
                given.append(Given(opt, rest or None, w.line, f"-{c}{rest}"))
            elif nxt is not None:
                given.append(Given(opt, nxt.text, w.line, f"-{c} {nxt.text}"))
                i += 1
            else:
                problems.append(Problem(w.line, f"option requires an argument -- '{c}'"))
            break
        i += 1
    return given, problems, i
