"""Read an ``#SBATCH`` script as sbatch reads it, then map it onto gpufleet's JobSpec.

Two steps, kept apart:

1. :func:`read_request` reads the script exactly as sbatch does (Slurm's ``src/sbatch/opt.c``):
   directives are the lines that start with ``#SBATCH`` (or ``#SLURM``) before the first command
   line; each is split into words as sbatch's ``get_argument`` splits them (quotes group, a
   backslash escapes, an unquoted ``#`` ends the line); the words of all lines are read with
   sbatch's option table and getopt_long (:mod:`gpufleet.io.slurm_opts`); command-line options
   come after and win. The result is a :class:`SlurmRequest` in Slurm's own terms. Every option
   sbatch accepts is accepted; only what sbatch refuses is refused, every problem at once.
2. :class:`_Build` maps the request onto a JobSpec: with ``--nodes`` (or ``--ntasks-per-node``)
   one worker per node on distinct nodes, its tasks sharing the node's GPUs, CPUs and memory;
   with only ``--ntasks``, one worker per task. What a JobSpec cannot express yet is refused
   here, at submit time, saying what gpufleet cannot do; options gpufleet does not act on get
   one warning each.
"""

from __future__ import annotations

import json
import math
import re
import shlex
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from gpufleet.io import slurm_values as v
from gpufleet.io.slurm_opts import OPTIONS, Given, Problem, Word, getopt
from gpufleet.model import hostlist
from gpufleet.model.arrays import MAX_ARRAY_SIZE, parse_array
from gpufleet.model.errors import SpecError
from gpufleet.model.limits import MAX_NODE_NAMES, SPEC_BOUNDS
from gpufleet.model.validate import Fields, text_problem

_T = TypeVar("_T")

# Interpreters that take the program text after ``-c``; the script runs as ``INTERP -c TEXT``.
C_INTERPRETERS = {"sh", "bash", "dash", "zsh", "ksh", "python", "python3"}
SHELLS = C_INTERPRETERS - {"python", "python3"}
_SPACE = " \t\n\v\f\r"  # C's isspace

# What gpufleet acts on; every other option sbatch accepts is read, kept, and warned about.
HONOURED = {
    "job-name", "nodes", "ntasks", "ntasks-per-node", "cpus-per-task", "cpus-per-gpu", "gres",
    "gpus", "gpus-per-node", "gpus-per-task", "mem", "mem-per-cpu", "mem-per-gpu", "time",
    "partition", "array", "dependency", "priority", "nice", "constraint", "signal", "requeue",
    "no-requeue", "exclusive", "nodelist", "exclude", "output", "error", "open-mode", "chdir",
    "export", "export-file", "input",
    "container-image", "container-mounts", "container-workdir",  # NVIDIA pyxis's (SPANK)
}  # fmt: skip
NO_EFFECT = {
    "qos": "gpufleet has no QOS; the queue (--partition) and --priority decide",
    "account": "fair share is per queue (--partition) in gpufleet",
    "oversubscribe": "gpufleet places by GPUs, CPUs and memory",
    "mail-type": "gpufleet sends no mail",
    "mail-user": "gpufleet sends no mail",
    "comment": "gpufleet keeps no job comment",
    "time-min": "gpufleet does not shorten a job's time limit to start it sooner",
    "hint": "gpufleet does not bind CPUs",
}
DEFAULT_NO_EFFECT = "gpufleet does not act on it"


# ----- the request, in Slurm's terms -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SlurmRequest:
    """What sbatch makes of a script and its command-line options, in Slurm's own fields.

    Counts are as sbatch computes them before the controller sees the job (``ntasks`` from
    ``--nodes × --ntasks-per-node``, one per node by default); memory in MB with 0 meaning all
    of each node's; time limits in minutes (``UNLIMITED`` for none, None when not given).
    """

    script: str
    job_name: str
    nodes: tuple[int, int]  # (min, max); max == min for a fixed count, 0 for no maximum
    nodes_set: bool
    ntasks: int
    ntasks_set: bool
    ntasks_per_node: int | None = None
    cpus_per_task: int | None = None
    cpus_per_gpu: int | None = None
    gres: tuple[v.Gres, ...] = ()  # per node, every kind (gpu, shard, nvme, …)
    gpus: tuple[v.Gpus, ...] = ()  # --gpus: for the whole job
    gpus_per_node: tuple[v.Gpus, ...] = ()  # --gpus-per-node and --gres=gpu…
    gpus_per_task: tuple[v.Gpus, ...] = ()
    gpus_per_socket: tuple[v.Gpus, ...] = ()
    ntasks_per_gpu: int | None = None
    mem_per_node_mb: int | None = None  # --mem; 0: all of each node's memory
    mem_per_cpu_mb: int | None = None
    mem_per_gpu_mb: int | None = None
    time_limit: v.TimeLimit | None = None  # minutes
    time_min: v.TimeLimit | None = None
    partitions: tuple[str, ...] = ()
    array: str | None = None
    dependency: str | None = None
    dependencies: tuple[v.Dependency, ...] = ()
    dependency_any: bool = False  # joined by "?": any one of them
    output: str = "slurm-%j.out"
    error: str = "slurm-%j.out"
    input: str | None = None
    constraint: str | None = None
    nodelist: str | None = None  # Slurm's hostlist syntax, as written
    exclude: str | None = None
    exclusive: str | None = None  # exclusive, user, mcs, topo, oversubscribe
    signal: v.Signal | None = None
    requeue: bool | None = None
    chdir: str | None = None
    export: str | None = None
    export_file: str | None = None
    open_mode: str | None = None
    account: str | None = None
    qos: str | None = None
    mail_type: tuple[str, ...] = ()
    mail_user: str | None = None
    hint: tuple[str, ...] = ()
    priority: int | str | None = None
    nice: int | None = None
    hold: bool = False
    # pyxis's --container-image, --container-mounts (SRC:DST[:FLAGS],...), --container-workdir
    container_image: str | None = None
    container_mounts: str | None = None
    container_workdir: str | None = None
    het_components: int = 1  # "#SBATCH hetjob" lines start more components (not read)
    other: tuple[tuple[str, str | None], ...] = ()  # every other option given, as given
    warnings: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready mapping (time limits also as [D-]HH:MM:SS)."""
        d = asdict(self)
        d["other"] = dict(self.other)
        for k in ("time_limit", "time_min"):
            limit = getattr(self, k)
            d[f"{k}_text"] = None if limit is None else v.format_minutes(limit)
        out: dict[str, Any] = json.loads(json.dumps(d))  # tuples become lists
        return out


@dataclass(frozen=True, slots=True)
class SbatchJob:
    spec: dict[str, Any]  # a JobSpec mapping, without ``user`` (the submitter adds it)
    array: str | None = None
    depends_on: tuple[tuple[str, str], ...] = ()
    output: str | None = None
    error: str | None = None
    warnings: tuple[str, ...] = ()
    request: SlurmRequest | None = None


class SbatchError(SpecError):
    """sbatch would refuse the script: every problem, each with its file and line."""

    def __init__(self, source: str, problems: Sequence[Problem]) -> None:
        first = problems[0]
        reason = first.message if len(problems) == 1 else f"{len(problems)} problems"
        super().__init__(reason, source=source, field=f"line {first.line}")
        self.problems = tuple(problems)
        self.args = ("\n".join(_where(source, p.line) + p.message for p in problems),)

    def __str__(self) -> str:
        return str(self.args[0])


def _where(source: str, line: int) -> str:
    return f"{source}:{line}: " if line else f"{source}: command line: "


# ----- reading the script ------------------------------------------------------------------


def read_script(path: str | Path) -> str:
    """A script's text as sbatch reads it: bytes as they are (no newline translation, so a DOS
    line break is seen and refused as sbatch refuses it; bytes that are not UTF-8, a Latin-1
    comment, are kept as lone surrogates: sbatch reads such a script). OSError as raised."""
    return Path(path).read_bytes().decode("utf-8", errors="surrogateescape")


def looks_like_sbatch(path: Path) -> bool:
    """True when ``path`` is a readable file whose header carries an ``#SBATCH`` directive."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return any(True for _ in _header(text))


def _header(text: str) -> Iterator[tuple[int, str, str]]:
    """(line number, magic word, the text after it) for each directive line, as sbatch finds
    them: lines that start with ``#SBATCH`` (or ``#SLURM``), up to the first line that is
    neither blank nor a comment."""
    for n, line in enumerate(text.split("\n"), start=1):
        for magic in ("#SBATCH", "#SLURM"):
            if line.startswith(magic):
                yield n, magic, line[len(magic) :]
                break
        else:
            stripped = line.lstrip(_SPACE)
            if stripped and not stripped.startswith("#"):
                return


def split_directive(rest: str) -> tuple[list[str], str]:
    """The words of one directive line as sbatch's get_argument splits them, and a problem
    ("" when none): quotes (' or ") group, a backslash keeps the next character, an unquoted
    ``#`` ends the line."""
    words: list[str] = []
    i, n = 0, len(rest)
    while True:
        while i < n and rest[i] in _SPACE:
            i += 1
        if i >= n:
            return words, ""
        if rest[i] == ":":
            return words, f"Unexpected `:` in [{rest.strip()}]"
        word: list[str] = []
        quote = ""
        escape = False
        while i < n and (quote or rest[i] not in _SPACE):
            c = rest[i]
            if escape:
                escape = False
            elif c == "\\":
                escape = True
                i += 1
                continue
            elif quote:
                if c == quote:
                    quote = ""
                    i += 1
                    continue
            elif c in "\"'":
                quote = c
                i += 1
                continue
            elif c == "#":
                break
            word.append(c)
            i += 1
        if quote:
            return words, f"Unmatched `{quote}` in [{rest.strip()}]"
        if not word:
            return words, ""  # an unquoted "#": the rest of the line is a comment
        words.append("".join(word))


def _words(text: str, source: str) -> tuple[list[Word], list[Problem], list[str], int]:
    """(words of the first component's directives, problems, warnings, components)."""
    words, problems, warnings, later = _component_words(text, source)
    return words, problems, warnings, len(later) + 1


def _component_words(
    text: str, source: str
) -> tuple[list[Word], list[Problem], list[str], list[list[Word]]]:
    """(words of the first component's directives, problems, warnings, the words of each
    later component of a heterogeneous job)."""
    words: list[Word] = []
    later: list[list[Word]] = []
    problems: list[Problem] = []
    warnings: list[str] = []
    component = 0
    for n, magic, rest in _header(text):
        if magic == "#SLURM" and not any("#SLURM" in w for w in warnings):
            warnings.append(
                f"{source}:{n}: #SLURM: sbatch reads it as #SBATCH, with an error asking to "
                "change it to #SBATCH"
            )
        low = rest.lower()
        for sep in ("packjob", "hetjob"):  # sbatch blanks the first separator word out
            k = low.find(sep)
            if k >= 0:
                rest = rest[:k] + " " * len(sep) + rest[k + len(sep) :]
                component += 1
                break
        line_words, problem = split_directive(rest)
        if problem:
            problems.append(Problem(n, problem))
        while len(later) < component:
            later.append([])
        (later[component - 1] if component else words).extend(Word(w, n) for w in line_words)
    return words, problems, warnings, later


def read_request(
    text: str,
    *,
    source: str,
    options: Sequence[str] = (),
    max_array_size: int = MAX_ARRAY_SIZE,
) -> SlurmRequest:
    """What sbatch makes of ``text`` (the script at ``source``) and of command-line
    ``options`` (which win over the script's), or a SbatchError listing every problem."""
    problems: list[Problem] = []
    if not text.strip(_SPACE):  # sbatch's _get_script_buffer, in its order
        why = "Batch script contains only whitespace!" if text else "Batch script is empty!"
        raise SbatchError(source, [Problem(1, why)])
    if not text.startswith("#!"):
        problems.append(
            Problem(
                1,
                "This does not look like a batch script. The first line must start "
                "with #! followed by the path to an interpreter.",
            )
        )
    if "\r\n" in text:
        n = text[: text.index("\r\n")].count("\n") + 1
        problems.append(Problem(n, "Batch script contains DOS line breaks (\\r\\n)"))
    if "\0" in text:
        n = text[: text.index("\0")].count("\n") + 1
        problems.append(Problem(n, "The batch script contains a NULL character"))
    words, found, warnings, later = _component_words(text, source)
    components = len(later) + 1
    problems += found
    given, found_opts, stop = getopt(words)
    problems += found_opts
    for other in later:  # sbatch reads every component: what it refuses there, it refuses
        other_given, found_opts, other_stop = getopt(other)
        problems += found_opts
        if other_stop < len(other):
            problems.append(Problem(other[other_stop].line, _invalid_directive(other, other_stop)))
        problems += _apply(other_given, source, max_array_size)[1]
    if stop < len(words):  # sbatch stops reading options there and names that word only
        problems.append(Problem(words[stop].line, _invalid_directive(words, stop)))
    cli = [Word(o, 0) for o in options]
    cli_given, cli_problems, cli_stop = getopt(cli)
    problems += cli_problems
    if cli_stop < len(cli):
        problems.append(Problem(0, f"unexpected argument {cli[cli_stop].text!r}"))
    req, found = _apply(given + cli_given, source, max_array_size)
    problems += found
    if components > 1:
        warnings.append(
            f"{source}: a heterogeneous job ({components} components): gpufleet reads only "
            "the first component's directives"
        )
    if problems:
        raise SbatchError(source, sorted(problems, key=lambda p: (p.line == 0, p.line)))
    return replace(req, warnings=tuple(warnings) + req.warnings, het_components=components)


def _invalid_directive(words: Sequence[Word], stop: int) -> str:
    w = words[stop]
    message = f"Invalid directive found in batch script: {w.text}"
    later = [x for x in words[stop + 1 :] if x.text.startswith("-")]
    if later:  # they look like options, but sbatch never reads them: say so once
        message += f" (the options after it, from line {later[0].line}, are not read)"
    return message


# ----- options → request --------------------------------------------------------------------


def _apply(
    given: Sequence[Given], source: str, max_array_size: int
) -> tuple[SlurmRequest, list[Problem]]:
    """Set each option in order (a later one wins, as in sbatch), check each value as sbatch
    does, then work out the counts as sbatch's _opt_verify does."""
    last: dict[str, Given] = {}
    problems: list[Problem] = []
    f: dict[str, Any] = {}
    mail: list[str] = []

    def bad(g: Given, e: Exception | str) -> None:
        problems.append(Problem(g.line, f"{g.text}: {e}"))

    for g in given:
        key, val = g.option.key, g.value
        last[key] = g
        try:
            _set(f, key, val, mail)
        except ValueError as e:
            bad(g, e)
    if mail:
        f["mail_type"] = ("NONE",) if "NONE" in mail[-1:] else tuple(dict.fromkeys(mail))

    def both(a: str, b: str, message: str) -> None:
        if a in last and b in last:
            problems.append(Problem(max(last[a].line, last[b].line), message))

    mems = [k for k in ("mem", "mem-per-cpu", "mem-per-gpu") if k in last]
    if len(mems) > 1:
        problems.append(
            Problem(
                max(last[k].line for k in mems),
                "--mem, --mem-per-cpu, and --mem-per-gpu are mutually exclusive",
            )
        )
    both("exclusive", "oversubscribe", "--exclusive and --oversubscribe are mutually exclusive")
    both("cpus-per-task", "cpus-per-gpu", "--cpus-per-task, --tres-per-task=cpu:#, and "
         "--cpus-per-gpu are mutually exclusive")  # fmt: skip
    both("core-spec", "thread-spec", "-S/--core-spec and --thread-spec are mutually exclusive")
    both("bb", "bbf", "Cannot specify both --burst-buffer and --bbf")
    for other in ("gpus-per-task", "gpus-per-socket", "ntasks-per-node", "tres-per-task"):
        both("ntasks-per-gpu", other, f"--{other} is mutually exclusive with --ntasks-per-gpu")
    for root_only in ("uid", "gid"):
        if root_only in last:
            problems.append(
                Problem(last[root_only].line, f"--{root_only} only permitted by root user")
            )
    if "array" in last and f.get("array") is not None:
        try:
            parse_array(f["array"], max_size=max_array_size)
        except SpecError as e:
            bad(last["array"], f"Invalid --array specification: {e.reason}")
    if "hint" in last and any(k in last for k in ("ntasks-per-core", "threads-per-core")):
        f["hint"] = ()  # sbatch ignores --hint beside these

    req, nodes_problem = _verify(f, source)
    if nodes_problem:
        at = max((last[k] for k in ("nodes", "nodelist") if k in last), key=lambda g: g.line)
        problems.append(Problem(at.line, nodes_problem))
    warnings = tuple(
        f"{_where(source, g.line)}{g.text} has no effect here: "
        f"{NO_EFFECT.get(key, DEFAULT_NO_EFFECT)}"
        for key, g in sorted(last.items(), key=lambda kv: kv[1].line)
        if key not in HONOURED
    )
    return replace(req, warnings=req.warnings + _gres_warnings(req, last, source) + warnings), (
        problems
    )


def _gres_warnings(req: SlurmRequest, last: dict[str, Given], source: str) -> tuple[str, ...]:
    """What newer sbatch refuses in its GRES check and older sbatch took: said, not refused, so
    a script written for an older Slurm still reads."""
    out: list[str] = []
    if req.gpus_per_task and not req.ntasks_set and not req.gpus:
        g = last["gpus-per-task"]
        out.append(
            f"{_where(source, g.line)}{g.text} without -n/--ntasks or --gpus: sbatch 23.11 and "
            "later refuse this ('--gpus-per-task or --tres-per-task used without either --gpus "
            "or -n/--ntasks is not allowed')"
        )
    gpus = req.gpus + req.gpus_per_node + req.gpus_per_task + req.gpus_per_socket
    if len({g.type is None for g in gpus}) > 1:
        kinds = ("gres", "gpus", "gpus-per-node", "gpus-per-task", "gpus-per-socket")
        g = max((last[k] for k in kinds if k in last), key=lambda x: x.line)
        out.append(
            f"{_where(source, g.line)}GPUs asked for with and without a type: newer sbatch "
            "refuses this ('Invalid GRES specification (with and without type identification)')"
        )
    return tuple(out)


_KEEP_TEXT = {
    "job-name": "job_name", "array": "array", "constraint": "constraint",
    "nodelist": "nodelist", "exclude": "exclude", "chdir": "chdir", "export": "export",
    "account": "account", "qos": "qos", "mail-user": "mail_user", "input": "input",
    "export-file": "export_file",
    "container-image": "container_image", "container-mounts": "container_mounts",
    "container-workdir": "container_workdir",
}  # fmt: skip
_COUNTS = {
    "ntasks": "ntasks", "ntasks-per-node": "ntasks_per_node", "cpus-per-task": "cpus_per_task",
    "cpus-per-gpu": "cpus_per_gpu", "ntasks-per-gpu": "ntasks_per_gpu",
}  # fmt: skip
_MEMORY = {"mem": "mem_per_node_mb", "mem-per-cpu": "mem_per_cpu_mb",
           "mem-per-gpu": "mem_per_gpu_mb"}  # fmt: skip
_GPUS = {"gpus": "gpus", "gpus-per-node": "gpus_per_node_opt", "gpus-per-task": "gpus_per_task",
         "gpus-per-socket": "gpus_per_socket"}  # fmt: skip
_POSITIVE = {"ntasks-per-core", "ntasks-per-socket", "ntasks-per-tres", "cores-per-socket",
             "sockets-per-node", "threads-per-core", "mincpus", "thread-spec"}  # fmt: skip


def _set(f: dict[str, Any], key: str, val: str | None, mail: list[str]) -> None:
    """Check one option's value as sbatch does (ValueError with its reason) and keep it."""
    text = val or ""
    if key in _KEEP_TEXT:
        f[_KEEP_TEXT[key]] = text
    elif key in _COUNTS:
        f[_COUNTS[key]] = v.parse_int(text)
    elif key in _MEMORY:
        f[_MEMORY[key]] = _spec(key, v.mbytes, text)
    elif key in _GPUS:
        f[_GPUS[key]] = v.gpu_list(text)
    elif key in _POSITIVE:
        f.setdefault("other", {})[key] = str(v.parse_int(text))
    elif key == "nodes":
        f["nodes"] = v.node_count(text)
    elif key in ("time", "time-min"):
        f[key.replace("-", "_")] = _spec(key, v.time_minutes, text)
    elif key == "partition":
        f["partitions"] = tuple(p for p in text.split(",") if p)
    elif key == "gres":
        f["gres"] = v.gres_list(text)
    elif key == "dependency":
        f["dependency"] = text
        f["dependencies"], f["dependency_any"] = v.dependencies(text) if text else ((), False)
    elif key in ("output", "error"):
        f[key] = "/dev/null" if text.lower() == "none" else text
    elif key == "exclusive":
        f["exclusive"] = v.exclusive(val)
    elif key == "oversubscribe":
        f["exclusive"] = "oversubscribe"
    elif key == "signal":
        f["signal"] = v.signal(text)
    elif key in ("requeue", "no-requeue"):
        f["requeue"] = key == "requeue"
    elif key == "open-mode":
        f["open_mode"] = v.open_mode(text)
    elif key == "mail-type":
        mail.extend(v.mail_types(text))
    elif key == "hint":
        f["hint"] = v.hint(text)
    elif key == "priority":
        f["priority"] = v.priority(text)
    elif key == "nice":
        f["nice"] = v.nice(val)
    elif key == "hold":
        f["hold"] = True
    else:
        _check_other(key, val)
        f.setdefault("other", {})[key] = val


_TIME_FORMS = "minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS"
_SIZE_FORMS = "a whole number of MB, or one with K, M, G or T (16G)"


def _spec(key: str, parse: Callable[[str], _T], text: str) -> _T:
    """``parse(text)``, or sbatch's own refusal, "Invalid --KEY specification", and the forms
    it takes (the option and its value are already in front of the message)."""
    try:
        return parse(text)
    except ValueError:
        forms = _SIZE_FORMS if parse is v.mbytes else _TIME_FORMS
        raise ValueError(f"Invalid --{key} specification: expected {forms}") from None


def _check_other(key: str, val: str | None) -> None:
    """The checks sbatch makes on options gpufleet only keeps."""
    text = val or ""
    if key in ("delay-boot",):
        _spec(key, v.time_seconds, text)
    elif key in ("tmp",):
        _spec(key, v.mbytes, text)
    elif key == "core-spec":
        v.parse_int(text, positive=False)
    elif key == "oom-kill-step" and val is not None and text not in ("0", "1"):
        raise ValueError("Invalid --oom-kill-step specification: expected 0 or 1")
    elif key == "wait-all-nodes":
        if v.parse_int(text, positive=False) > 1:
            raise ValueError("Invalid --wait-all-nodes specification")
    elif key == "kill-on-invalid-dep" and text.lower() not in ("yes", "no"):
        raise ValueError("Invalid --kill-on-invalid-dep specification")
    elif key == "no-kill" and val is not None and text.lower() not in ("set", "off", "no"):
        raise ValueError("Invalid --no-kill specification")
    elif key == "switches":
        count, _, wait = text.partition("@")
        v.parse_int(count)
        if wait:
            v.time_seconds(wait)
    elif key == "get-user-env" and val is not None:
        if not re.fullmatch(r"-?\d*[SsLl]?", text):
            raise ValueError("Invalid --get-user-env specification")
    elif key == "gres-flags":
        for tok in text.split(","):
            if tok.lower() not in (
                "allow-task-sharing",  # Slurm 23.11
                "disable-binding",
                "enforce-binding",
                "multiple-tasks-per-sharing",
                "one-task-per-sharing",
            ):
                raise ValueError(f"Invalid --gres-flags specification: {tok}")


def _verify(f: dict[str, Any], source: str) -> tuple[SlurmRequest, str]:
    """The counts sbatch works out before it sends the job (its _opt_verify), and its refusal
    of a node count the node list does not fit ("" when none)."""
    warnings: list[str] = []
    problem = ""
    nodes_set = "nodes" in f
    lo, hi = f.get("nodes", (1, 0))
    nodelist = f.get("nodelist")
    if nodelist:
        count = v.hostlist_count(nodelist)
        if count is not None:
            lo = max(count, lo) if nodes_set else count
            nodes_set = True
            if hi and lo > hi:  # -w names more nodes than -N allows
                problem = f"invalid number of nodes (-N {lo}-{hi}): the node list names {count}"
    per_node = f.get("ntasks_per_node")
    ntasks_set = "ntasks" in f
    ntasks = f.get("ntasks", 1)
    if per_node and not ntasks_set and (hi == 0 or lo == hi):
        ntasks, ntasks_set = lo * per_node, True
    elif nodes_set and (lo == hi or hi == 0) and not ntasks_set:
        ntasks = max(lo, 1)  # one task per node
    elif nodes_set and ntasks_set:
        if hi and ntasks < hi:
            hi = ntasks
        if ntasks < lo:
            warnings.append(
                f"{source}: can't run {ntasks} processes on {lo} nodes, setting nnodes to "
                f"{ntasks} (as sbatch does)"
            )
            lo = hi = ntasks
    if nodes_set and hi == 0:
        hi = lo
    if not nodes_set and ntasks_set and per_node:
        lo = hi = -(-ntasks // per_node)  # as slurm_opt_create_job_desc
    gres = f.get("gres", ())
    from_gres = tuple(v.Gpus(g.type, g.count) for g in gres if g.name == "gpu")
    array = f.get("array")
    output = f.get("output") or ("slurm-%A_%a.out" if array else "slurm-%j.out")
    name = f.get("job_name") or Path(source).name
    return SlurmRequest(
        script=source,
        job_name=name,
        nodes=(lo, hi if nodes_set else lo),
        nodes_set=nodes_set,
        ntasks=ntasks,
        ntasks_set=ntasks_set,
        ntasks_per_node=per_node,
        cpus_per_task=f.get("cpus_per_task"),
        cpus_per_gpu=f.get("cpus_per_gpu"),
        gres=gres,
        gpus=f.get("gpus", ()),
        gpus_per_node=f.get("gpus_per_node_opt", ()) + from_gres,
        gpus_per_task=f.get("gpus_per_task", ()),
        gpus_per_socket=f.get("gpus_per_socket", ()),
        ntasks_per_gpu=f.get("ntasks_per_gpu"),
        mem_per_node_mb=f.get("mem_per_node_mb"),
        mem_per_cpu_mb=f.get("mem_per_cpu_mb"),
        mem_per_gpu_mb=f.get("mem_per_gpu_mb"),
        time_limit=f.get("time"),
        time_min=f.get("time_min"),
        partitions=f.get("partitions", ()),
        array=array,
        dependency=f.get("dependency"),
        dependencies=f.get("dependencies", ()),
        dependency_any=f.get("dependency_any", False),
        output=output,
        error=f.get("error") or output,
        input=f.get("input"),
        constraint=f.get("constraint"),
        nodelist=nodelist,
        exclude=f.get("exclude"),
        exclusive=f.get("exclusive"),
        signal=f.get("signal"),
        requeue=f.get("requeue"),
        container_image=f.get("container_image"),
        container_mounts=f.get("container_mounts"),
        container_workdir=f.get("container_workdir"),
        chdir=f.get("chdir"),
        export=f.get("export"),
        export_file=f.get("export_file"),
        open_mode=f.get("open_mode"),
        account=f.get("account"),
        qos=f.get("qos"),
        mail_type=f.get("mail_type", ()),
        mail_user=f.get("mail_user"),
        hint=f.get("hint", ()),
        priority=f.get("priority"),
        nice=f.get("nice"),
        hold=f.get("hold", False),
        other=tuple(f.get("other", {}).items()),
        warnings=tuple(warnings),
    ), problem


# ----- the script as a job -----------------------------------------------------------------


def parse_sbatch(
    path: str | Path, args: Sequence[str] = (), *, options: Sequence[str] = ()
) -> SbatchJob:
    p = Path(path)
    try:
        text = read_script(p)
    except FileNotFoundError:
        raise SpecError("no such file", source=str(p)) from None
    except (OSError, UnicodeDecodeError) as e:
        raise SpecError(f"cannot read: {e}", source=str(p)) from None
    return parse_sbatch_text(text, source=str(p), args=args, options=options)


def parse_sbatch_text(
    text: str,
    *,
    source: str,
    args: Sequence[str] = (),
    options: Sequence[str] = (),
    max_array_size: int = MAX_ARRAY_SIZE,
) -> SbatchJob:
    """The script as a gpufleet job: sbatch's reading, then the JobSpec mapping."""
    req = read_request(text, source=source, options=options, max_array_size=max_array_size)
    for n, line in enumerate(text.splitlines(), start=1):
        # the script becomes an exec argument: refused here, with its line, not at the server
        problem = text_problem(line, max_len=len(line) + 1)
        if problem:
            raise SpecError(f"the script {problem}", source=source, field=f"line {n}")
    job = _Build(req, source, _lines(text, options), max_array_size).job(
        _command(text, source, args)
    )
    return replace(job, warnings=req.warnings + job.warnings + _launcher_warnings(text, source))


def _lines(text: str, options: Sequence[str]) -> dict[str, Given]:
    """The last time each option was given (for messages that name the line)."""
    words, _, _, _ = _words(text, "")
    given, _, _ = getopt(words + [Word(o, 0) for o in options])
    return {g.option.key: g for g in given}


def _launcher_warnings(text: str, source: str) -> tuple[str, ...]:
    """Slurm runs a batch script once and ``srun`` fans it out; so does gpufleet (the script on
    the first node), whose ``srun`` is its own (gpufleet.slurm), not Slurm's."""
    return tuple(
        f"{source}:{n}: srun: gpufleet runs the script once, on the first node, as Slurm "
        "does; srun there needs gpufleet's own srun on the job's PATH"
        for n, line in enumerate(text.splitlines(), start=1)
        if re.match(r"\s*(exec\s+)?srun\b", line)
    )


def _command(text: str, source: str, args: Sequence[str]) -> list[str]:
    """Run the script's text with its ``#!`` interpreter, as Slurm runs the script file."""
    first = text.split("\n", 1)[0]
    interp = shlex.split(first[2:]) if first.startswith("#!") else ["/bin/bash"]
    if not interp:
        raise SpecError("the #! line names no interpreter", source=source, field="line 1")
    prog = Path(interp[-1] if Path(interp[0]).name == "env" else interp[0]).name
    if prog not in C_INTERPRETERS:
        raise SpecError(
            f"gpufleet cannot run this yet: interpreter {prog!r} is not supported; gpufleet "
            f"runs the script's text with INTERPRETER -c, for one of "
            f"{', '.join(sorted(C_INTERPRETERS))}",
            source=source,
            field="line 1",
        )
    # shells take $0 after the text; Python would see it as sys.argv[1], so it gets none
    name = [Path(source).name] if prog in SHELLS else []
    return [*interp, "-c", text, *name, *args]


CANNOT = "gpufleet cannot run this yet: "


@dataclass
class _Build:
    """A SlurmRequest as a JobSpec mapping: ``nodes × tasks per node`` workers, each with the
    same GPUs, CPUs and memory. What a JobSpec cannot express is refused, saying so."""

    req: SlurmRequest
    source: str
    seen: dict[str, Given] = field(default_factory=dict)
    max_array_size: int = MAX_ARRAY_SIZE
    notes: list[str] = field(default_factory=list)

    def err(self, message: str, *names: str) -> SpecError:
        lines = sorted({self.seen[n].line for n in names if n in self.seen})
        where = ", ".join(f"line {x}" if x else "command line" for x in lines)
        return SpecError(message, source=self.source, field=where)

    def text(self, name: str) -> str:
        return self.seen[name].text if name in self.seen else f"--{name}"

    def job(self, command: list[str]) -> SbatchJob:
        r = self.req
        spec: dict[str, Any] = {"name": r.job_name}
        if r.partitions:
            # -p a,b: the job may start in any of them (Slurm: the one offering the earliest
            # start; gpufleet: the first that admits it, scheduler/admission.py)
            parts = list(dict.fromkeys(r.partitions))
            if len(parts) > 1:
                spec["queues"] = parts
            else:
                spec["queue"] = parts[0]
        by_node, workers, per = self.layout()
        spec["workers"] = workers
        if by_node:
            if workers > 1:
                spec["distinct_nodes"] = True
            if per > 1:
                spec["tasks_per_worker"] = per
        elif workers > 1:  # Slurm packs the tasks of a job without --nodes where it can
            spec["topology"] = {"level": "node", "required": False}
        gpus, gres_type = self.gpus(by_node, workers, per)
        spec["gpus_per_worker"] = gpus
        if gres_type:
            spec["gres_type"] = gres_type
        cpus: int | None = None
        if r.cpus_per_gpu is not None:
            cpus = r.cpus_per_gpu * max(gpus, 1)
        elif r.cpus_per_task is not None or per > 1:
            cpus = (r.cpus_per_task or 1) * per  # a worker's tasks, cpus-per-task each
        if cpus is not None:
            spec["cpus"] = cpus
        mem = self.memory(by_node, workers, cpus or 1, gpus)
        if mem == 0 and r.mem_per_node_mb == 0:
            spec["whole_node_memory"] = True
            spec["memory_mib"] = 0
        elif mem is not None:
            spec["memory_mib"] = mem
        spec.update(self.nodes_terms())
        whole = [k for k in ("exclusive", "whole_node_memory") if spec.get(k)]
        if whole and not by_node and workers > 1:  # Slurm would let the tasks share a node
            self.note(
                "exclusive" if "exclusive" in whole else "mem",
                f"without --nodes each of the {workers} tasks takes a whole node "
                f"({'--exclusive' if 'exclusive' in whole else '--mem=0'}); give --nodes=1 "
                f"--ntasks-per-node={workers} to run them on one",
            )
        if r.time_limit is not None and r.time_limit != v.UNLIMITED:
            spec["time_limit_s"] = float(r.time_limit * 60)
        priority = self.priority()
        if priority is not None:
            spec["priority"] = priority
        warning = self.signal()
        if warning is not None:
            spec["signal"] = warning
        if r.requeue is not None:
            spec["requeue"] = r.requeue
        container = self.container()
        if container is not None:
            spec["container"] = container
        spec["command"] = command
        # Slurm's batch job: the script once, on the first node, its output in its files (the
        # working directory and the environment are the submitter's: the CLI adds them)
        spec["batch"] = True
        spec["output"] = r.output
        if "error" in self.seen:
            spec["error"] = r.error
        if r.open_mode is not None:
            spec["open_mode"] = r.open_mode
        if r.input:
            spec["input"] = "/dev/null" if r.input.lower() == "none" else r.input
        if r.array is not None:
            try:  # the size is checked from the text, nothing is expanded
                parse_array(r.array, max_size=self.max_array_size)
            except SpecError as e:
                raise self.err(f"{self.text('array')}: {e.reason}", "array") from None
        return SbatchJob(
            spec,
            r.array,
            self.dependencies(),
            r.output,
            r.error,
            warnings=tuple(self.notes),
            request=r,
        )

    def note(self, name: str, message: str) -> None:
        g = self.seen.get(name)
        self.notes.append(f"{_where(self.source, g.line if g else 0)}{message}")

    def layout(self) -> tuple[bool, int, int]:
        """(by node, workers, tasks per worker), from sbatch's counts: with --nodes (or
        --ntasks-per-node, or -w) one worker per node and the node's tasks in it; with only
        --ntasks one worker per task."""
        r = self.req
        lo, hi = r.nodes
        if lo != hi:
            raise self.err(
                f"{CANNOT}{self.text('nodes')} asks for {lo} to {hi} nodes; a gpufleet job "
                "has a fixed number of nodes (give one number)",
                "nodes",
            )
        nodes = lo or 1
        by_node = r.nodes_set or r.ntasks_per_node is not None
        if not by_node:
            return False, max(r.ntasks, 1), 1
        if r.ntasks % nodes:
            raise self.err(
                f"{CANNOT}{self.text('ntasks')} do not divide evenly over {nodes} nodes: "
                "every gpufleet node runs the same number of tasks",
                "ntasks",
                "nodes",
            )
        per = max(r.ntasks // nodes, 1)
        if r.ntasks_per_node is not None and per > r.ntasks_per_node:
            raise self.err(
                f"{self.text('ntasks')} needs {per} tasks per node, more than "
                f"{self.text('ntasks-per-node')}",
                "ntasks",
                "nodes",
                "ntasks-per-node",
            )
        return True, nodes, per

    def gpus(self, by_node: bool, workers: int, per: int) -> tuple[int, str]:
        """(GPUs per worker, the site's GPU type name or "")."""
        r = self.req
        other = [g for g in r.gres if g.name != "gpu"]
        if other:
            raise self.err(
                f"{CANNOT}{self.text('gres')}: generic resources other than GPUs "
                f"({', '.join(g.name for g in other)}) are not scheduled",
                "gres",
            )
        ways = {
            "gpus-per-node": r.gpus_per_node,
            "gpus": r.gpus,
            "gpus-per-task": r.gpus_per_task,
            "gpus-per-socket": r.gpus_per_socket,
        }
        given = [k for k, x in ways.items() if x]
        names = [n for n in ("gres", "gpus-per-node", "gpus", "gpus-per-task") if n in self.seen]
        if len(given) > 1 or len(r.gpus_per_node) > 1:
            raise self.err(
                CANNOT + "GPUs are asked for more than one way ("
                + " and ".join(self.text(n) for n in names) + "); give them one way",
                *names,
            )  # fmt: skip
        if not given:
            return 0, ""  # Slurm gives no GPU unless asked
        way = given[0]
        if way == "gpus-per-socket":
            raise self.err(f"{CANNOT}{self.text(way)}: GPUs per socket", way)
        if len(ways[way]) > 1:
            raise self.err(f"{CANNOT}{self.text(way)}: GPUs of several types at once", way)
        g = ways[way][0]
        name = way if way != "gpus-per-node" or "gpus-per-node" in self.seen else "gres"
        gres_type = (g.type or "").lower()
        if way == "gpus-per-task":
            return g.count * per, gres_type  # a worker's tasks, each its own GPUs
        if way == "gpus-per-node":
            if not by_node and workers > 1:
                raise self.err(
                    f"{CANNOT}{self.text(name)} is per node, and without --nodes the node "
                    f"count of {self.text('ntasks')} is Slurm's choice; give --nodes (or "
                    "--gpus-per-task)",
                    name,
                    "ntasks",
                )
            return g.count, gres_type  # the node's GPUs, shared by its tasks
        if g.count % workers:  # --gpus: for the whole job
            what = "nodes" if by_node else "tasks"
            raise self.err(
                f"{CANNOT}{self.text(name)} does not divide among {workers} {what}: every "
                "gpufleet worker gets the same number of GPUs",
                name,
                *[x for x in ("nodes", "ntasks-per-node", "ntasks") if x in self.seen],
            )
        return g.count // workers, gres_type

    def nodes_terms(self) -> dict[str, Any]:
        """-w, -x, -C and --exclusive as the spec's nodelist, exclude, constraint, exclusive."""
        r = self.req
        out: dict[str, Any] = {}
        for key in ("nodelist", "exclude"):
            text = getattr(r, key)
            if text and "/" in text:
                raise self.err(
                    f"{CANNOT}{self.text(key)}: a file of node names (Slurm reads a name with / "
                    "as one); give the names",
                    key,
                )
            if text:
                try:
                    names = hostlist.expand(text, max_hosts=MAX_NODE_NAMES)
                except ValueError as e:
                    raise self.err(f"{self.text(key)}: {e}", key) from None
                out[key] = list(dict.fromkeys(names))
        if r.constraint:
            from gpufleet.model.constraint import parse as parse_constraint  # rare: lazily

            try:
                out["constraint"] = parse_constraint(r.constraint).text()
            except ValueError as e:
                raise self.err(f"{CANNOT}{self.text('constraint')}: {e}", "constraint") from None
        if r.exclusive == "exclusive":
            out["exclusive"] = True
        elif r.exclusive is not None:
            self.note(
                "exclusive",
                f"{self.text('exclusive')} has no effect here: only whole-node --exclusive is "
                "honoured (gpufleet has no user/MCS/topology sharing rules)",
            )
        return out

    def memory(self, by_node: bool, workers: int, cpus: float, gpus: int) -> int | None:
        """MiB per worker: --mem per node (0: all of it), --mem-per-cpu × its CPUs,
        --mem-per-gpu × its GPUs."""
        r = self.req
        if r.mem_per_node_mb is not None:
            if r.mem_per_node_mb == 0 or by_node:
                return r.mem_per_node_mb
            # without --nodes the tasks may share a node: each task a share of one node's
            return max(r.mem_per_node_mb // max(workers, 1), 1)
        if r.mem_per_cpu_mb is not None:
            return math.ceil(r.mem_per_cpu_mb * cpus)
        if r.mem_per_gpu_mb is not None:
            if gpus == 0:
                raise self.err(
                    f"{CANNOT}{self.text('mem-per-gpu')} but the job asks for no GPU",
                    "mem-per-gpu",
                )
            return r.mem_per_gpu_mb * gpus
        return None

    def priority(self) -> int | None:
        r = self.req
        out: int | None = None
        if isinstance(r.priority, int):
            out = r.priority
        elif r.priority is not None:
            self.note("priority", f"{self.text('priority')} has no effect here")
        if r.nice is not None:
            out = (out or 0) - r.nice
        return out

    def container(self) -> dict[str, Any] | None:
        """pyxis's --container-image, --container-mounts and --container-workdir as the spec's
        ``container``, checked here so that a problem names its line."""
        r = self.req
        names = ("container-image", "container-mounts", "container-workdir")
        if r.container_image is None:
            given = [n for n in names[1:] if n in self.seen]
            if given:
                raise self.err(f"{self.text(given[0])} needs --container-image", *given)
            return None
        c = {
            "image": r.container_image,
            "mounts": r.container_mounts or None,
            "workdir": r.container_workdir or None,
        }
        from gpufleet.model.container import read_container  # rare: lazily

        try:
            read_container(Fields({"container": c}, source=self.source, path=""))
        except SpecError as e:
            raise self.err(f"{e.field}: {e.reason}", *names) from None
        return c

    def signal(self) -> dict[str, Any] | None:
        """--signal=[B:]SIG[@T] as the spec's ``signal``: B: sends it to each task's own process
        (gpufleet has no separate batch shell: the script runs once per task)."""
        w = self.req.signal
        if w is None:
            return None
        lo, hi = SPEC_BOUNDS["signal.signal"]
        if w.reservation:
            raise self.err(
                f"{CANNOT}{self.text('signal')}: R: (at the end of a reservation): gpufleet has "
                "no reservations",
                "signal",
            )
        if not lo <= w.number <= hi:
            raise self.err(
                f"{CANNOT}{self.text('signal')}: signal {w.number} is not one a Linux node can "
                f"send ({lo} to {hi})",
                "signal",
            )
        if self.req.time_limit is None or self.req.time_limit == v.UNLIMITED:
            self.note(
                "signal", f"{self.text('signal')} has no effect without a time limit (--time)"
            )
        return {"signal": w.number, "before_s": w.seconds, "batch_only": w.batch_only}

    def dependencies(self) -> tuple[tuple[str, str], ...]:
        r = self.req
        if r.dependency is None:
            return ()
        unsupported = sorted(
            {d.type for d in r.dependencies if d.type not in DEPENDENCY_TYPES or d.minutes}
        )
        if r.dependency_any or unsupported:
            what = "'?' (any of)" if r.dependency_any else ", ".join(unsupported)
            raise self.err(
                f"{CANNOT}{self.text('dependency')}: {what} is not supported "
                f"(gpufleet knows {' and '.join(DEPENDENCY_TYPES)}, every one must hold)",
                "dependency",
            )
        return tuple((d.type, d.job) for d in r.dependencies if d.job is not None)


# ----- value formats used by the CLI's own flags -------------------------------------------


def parse_time(text: str) -> float | None:
    """Seconds from any of Slurm's time formats; None for no limit (0, UNLIMITED, INFINITE)."""
    secs = v.time_seconds(text.strip())
    if secs == v.UNLIMITED:
        return None
    return float(secs) or None  # Slurm: a limit of 0 means none


_MEM_UNITS = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}


def parse_memory(text: str) -> int:
    """MiB from a memory size: a number with K, M, G or T; a bare number is MB."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([KMGTkmgt])?(?:i?[Bb])?", text.strip())
    if not m:
        raise ValueError("expected a size such as 4096, 500M, 64G or 1T (a bare number is MB)")
    return math.ceil(float(m[1]) * _MEM_UNITS[(m[2] or "M").upper()])


DEPENDENCY_TYPES = ("afterok", "afterany")


def parse_dependency(text: str) -> tuple[tuple[str, str], ...]:
    """``afterok:12:13,afterany:14`` → ((afterok, 12), (afterok, 13), (afterany, 14)): the
    kinds gpufleet supports."""
    if "?" in text:
        raise ValueError("'?' (any of) is not supported: every dependency must hold")
    out: list[tuple[str, str]] = []
    for item in text.split(","):
        kind, *ids = item.strip().split(":")
        if kind not in DEPENDENCY_TYPES:
            raise ValueError(
                f"dependency type {kind!r} is not supported (use {' or '.join(DEPENDENCY_TYPES)})"
            )
        if not ids or not all(re.fullmatch(r"[\w.-]+", j) for j in ids):
            raise ValueError(f"{item!r}: expected {kind}:JOB[:JOB…]")
        out.extend((kind, j) for j in ids)
    return tuple(out)


OPTION_COUNT = len(OPTIONS)
