"""Read an ``#SBATCH`` script as it is: its directives become a JobSpec mapping, an array, and
dependencies; its text becomes the command. Every refusal names the file and the line.

Slurm's model maps onto gpufleet's gang: ``nodes × ntasks-per-node`` tasks are the workers, each
with the same whole number of GPUs (per-node GPUs must divide among a node's tasks), and
``--cpus-per-task`` CPUs. A directive gpufleet does not know is an error, never a silent default.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from gpufleet.model import catalog
from gpufleet.model.arrays import MAX_ARRAY_SIZE, parse_array
from gpufleet.model.errors import SpecError
from gpufleet.model.validate import text_problem

Arg = Literal["required", "optional"]  # "optional": only in the --opt=value form, as getopt

# long name → (short letter, argument). Only what gpufleet can honour, or knowingly ignores.
OPTIONS: dict[str, tuple[str | None, Arg]] = {
    "job-name": ("J", "required"),
    "nodes": ("N", "required"),
    "ntasks": ("n", "required"),
    "ntasks-per-node": (None, "required"),
    "gres": (None, "required"),
    "gpus": ("G", "required"),
    "gpus-per-node": (None, "required"),
    "gpus-per-task": (None, "required"),
    "cpus-per-task": ("c", "required"),
    "mem": (None, "required"),
    "mem-per-cpu": (None, "required"),
    "mem-per-gpu": (None, "required"),
    "time": ("t", "required"),
    "partition": ("p", "required"),
    "array": ("a", "required"),
    "dependency": ("d", "required"),
    "output": ("o", "required"),
    "error": ("e", "required"),
    "priority": (None, "required"),
    "nice": (None, "optional"),
    "constraint": ("C", "required"),
    # accepted so that scripts run as they are, but they change nothing here: a warning says so
    "qos": ("q", "required"),
    "account": ("A", "required"),
    "exclusive": (None, "optional"),
    "mail-type": (None, "required"),
    "mail-user": (None, "required"),
    "comment": (None, "required"),
}
NO_EFFECT = {
    "qos": "gpufleet has no QOS; the queue (--partition) and --priority decide",
    "account": "fair share is per queue (--partition) in gpufleet",
    "exclusive": "gpufleet places by GPUs, CPUs and memory; ask for a whole node's GPUs instead",
    "mail-type": "gpufleet sends no mail",
    "mail-user": "gpufleet sends no mail",
    "comment": "gpufleet keeps no job comment",
}
SHORT = {short: long for long, (short, _) in OPTIONS.items() if short}
# Interpreters that take the program text after ``-c``; the script runs as ``INTERP -c TEXT``.
C_INTERPRETERS = {"sh", "bash", "dash", "zsh", "ksh", "python", "python3"}
SHELLS = C_INTERPRETERS - {"python", "python3"}


@dataclass(frozen=True, slots=True)
class SbatchJob:
    spec: dict[str, Any]  # a JobSpec mapping, without ``user`` (the submitter adds it)
    array: str | None = None
    depends_on: tuple[tuple[str, str], ...] = ()
    output: str | None = None
    error: str | None = None
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class _Seen:
    value: str | None  # None for a flag given without a value
    line: int
    text: str  # as written, for messages: "--gres=gpu:8"


def looks_like_sbatch(path: Path) -> bool:
    """True when ``path`` is a readable file whose header carries an ``#SBATCH`` directive."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return any(True for _ in _header(text))


def parse_sbatch(path: str | Path, args: Sequence[str] = ()) -> SbatchJob:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError("no such file", source=str(p)) from None
    except (OSError, UnicodeDecodeError) as e:
        raise SpecError(f"cannot read: {e}", source=str(p)) from None
    return parse_sbatch_text(text, source=str(p), args=args)


def parse_sbatch_text(
    text: str, *, source: str, args: Sequence[str] = (), max_array_size: int = MAX_ARRAY_SIZE
) -> SbatchJob:
    for n, line in enumerate(text.splitlines(), start=1):
        # the script becomes an exec argument: refused here, with its line, not at the server
        problem = text_problem(line, max_len=len(line) + 1)
        if problem:
            raise SpecError(f"the script {problem}", source=source, field=f"line {n}")
    seen = _read_directives(text, source)
    job = _Build(seen, source, max_array_size).job(_command(text, source, args))
    return replace(job, warnings=job.warnings + _launcher_warnings(text, source))


def _launcher_warnings(text: str, source: str) -> tuple[str, ...]:
    """Slurm runs a batch script once and ``srun`` fans it out; gpufleet runs the script on
    every worker already (with RANK, SLURM_PROCID, …), so a nested launcher would fan out twice."""
    return tuple(
        f"{source}: line {n}: gpufleet runs this script once per worker (task), as srun "
        "would: run the program without srun"
        for n, line in enumerate(text.splitlines(), start=1)
        if re.match(r"\s*(exec\s+)?srun\b", line)
    )


# ----- reading the header -----------------------------------------------------------------


def _header(text: str) -> Iterator[tuple[int, str]]:
    """(line number, the text after ``#SBATCH``) for each directive before the first command.

    As in Slurm, directives stop at the first line that is neither blank nor a comment."""
    for n, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if line.startswith("#SBATCH") and (len(line) == 7 or line[7].isspace()):
            yield n, line[7:]
        elif stripped and not stripped.startswith("#"):
            return


def _read_directives(text: str, source: str) -> dict[str, _Seen]:
    seen: dict[str, _Seen] = {}
    unknown: list[tuple[str, int]] = []
    for n, rest in _header(text):
        try:
            words = shlex.split(rest, comments=True)
        except ValueError as e:
            raise SpecError(
                f"cannot split #SBATCH line: {e}", source=source, field=f"line {n}"
            ) from None
        i = 0
        while i < len(words):
            w = words[i]
            name, value, took = _option(w, words[i + 1] if i + 1 < len(words) else None)
            if name is None:
                unknown.append((w.partition("=")[0], n))
                # an unknown option's value would read as a stray word: skip it too
                took = i + 1 < len(words) and not words[i + 1].startswith("-") and "=" not in w
            elif name == "":
                raise SpecError(
                    f"unexpected {w!r}: #SBATCH lines hold options such as --nodes=2",
                    source=source,
                    field=f"line {n}",
                )
            else:
                if OPTIONS[name][1] == "required" and value is None:
                    raise SpecError(f"{w} needs a value", source=source, field=f"line {n}")
                shown = f"{w} {value}" if took else w
                seen[name] = _Seen(value, n, shown)  # a later directive wins, as in Slurm
            i += 2 if took else 1
    if unknown:
        listed = ", ".join(f"{w} (line {n})" for w, n in unknown)
        raise SpecError(
            f"unknown #SBATCH directive{'s' if len(unknown) > 1 else ''} {listed}; "
            f"gpufleet understands --{', --'.join(OPTIONS)} (delete or change the others)",
            source=source,
            field=f"line {unknown[0][1]}",
        )
    return seen


def _option(word: str, nxt: str | None) -> tuple[str | None, str | None, bool]:
    """(long name or None when unknown or "" when not an option, value, took the next word)."""
    if word.startswith("--"):
        key, eq, value = word[2:].partition("=")
        name = _long(key)
        if name is None:
            return None, None, False
        if eq:
            return name, value, False
        if OPTIONS[name][1] == "required" and nxt is not None:
            return name, nxt, True
        return name, None, False
    if word.startswith("-") and len(word) > 1:
        name = SHORT.get(word[1])
        if name is None:
            return None, None, False
        if len(word) > 2:  # -N2, like getopt
            return name, word[2:].removeprefix("="), False
        if OPTIONS[name][1] == "required" and nxt is not None:
            return name, nxt, True
        return name, None, False
    return "", None, False


def _long(key: str) -> str | None:
    """The option ``key`` names, allowing an unambiguous prefix as getopt does (``--part``)."""
    if key in OPTIONS:
        return key
    matches = [k for k in OPTIONS if k.startswith(key)] if key else []
    return matches[0] if len(matches) == 1 else None


def _command(text: str, source: str, args: Sequence[str]) -> list[str]:
    """Run the script's text with its ``#!`` interpreter, as Slurm runs the script file."""
    first = text.split("\n", 1)[0]
    interp = shlex.split(first[2:]) if first.startswith("#!") else ["/bin/bash"]
    if not interp:
        raise SpecError("the #! line names no interpreter", source=source, field="line 1")
    prog = Path(interp[-1] if Path(interp[0]).name == "env" else interp[0]).name
    if prog not in C_INTERPRETERS:
        raise SpecError(
            f"interpreter {prog!r} is not supported: gpufleet runs the script's text with "
            f"INTERPRETER -c; use one of {', '.join(sorted(C_INTERPRETERS))}",
            source=source,
            field="line 1",
        )
    # shells take $0 after the text; Python would see it as sys.argv[1], so it gets none
    name = [Path(source).name] if prog in SHELLS else []
    return [*interp, "-c", text, *name, *args]


# ----- directives → spec ------------------------------------------------------------------


class _Build:
    def __init__(
        self, seen: dict[str, _Seen], source: str, max_array_size: int = MAX_ARRAY_SIZE
    ) -> None:
        self.seen = seen
        self.source = source
        self.max_array_size = max_array_size

    def err(self, message: str, *names: str) -> SpecError:
        lines = sorted({self.seen[n].line for n in names if n in self.seen})
        field = ", ".join(f"line {x}" for x in lines) if lines else ""
        return SpecError(message, source=self.source, field=field)

    def get(self, name: str) -> str | None:
        s = self.seen.get(name)
        return s.value if s else None

    def text(self, name: str) -> str:
        return self.seen[name].text

    def count(self, name: str) -> int | None:
        v = self.get(name)
        if v is None:
            return None
        if name == "nodes" and re.fullmatch(r"(\d+)-\1", v):  # "2-2" is exactly 2
            v = v.split("-")[0]
        if not v.isdigit() or int(v) < 1:
            ranged = name == "nodes" and "-" in v
            hint = " (a node range is not supported: give one number)" if ranged else ""
            raise self.err(f"{self.text(name)}: expected a positive whole number{hint}", name)
        return int(v)

    def job(self, command: list[str]) -> SbatchJob:
        spec: dict[str, Any] = {}
        if (name := self.get("job-name")) is not None:
            spec["name"] = name
        else:  # Slurm's default job name is the script's file name
            spec["name"] = Path(self.source).name
        if (part := self.get("partition")) is not None:
            if "," in part:
                raise self.err(f"{self.text('partition')}: give one partition", "partition")
            spec["queue"] = part
        nodes, per_node = self.layout()
        workers = nodes * per_node
        spec["workers"] = workers
        if nodes == 1 and workers > 1:  # Slurm puts every task of a 1-node job on that node
            spec["topology"] = {"level": "node", "required": True}
        gpus, models = self.gpus(per_node, workers)
        spec["gpus_per_worker"] = gpus
        cpus = self.count("cpus-per-task")
        if cpus is not None:
            spec["cpus"] = cpus
        mem = self.memory(per_node, cpus or 1, gpus)
        if mem is not None:
            spec["memory_mib"] = mem
        models = self.constraint(models)
        if models:
            spec["gpu_models"] = models
        if (t := self.get("time")) is not None:
            try:
                limit = parse_time(t)
            except ValueError as e:
                raise self.err(f"{self.text('time')}: {e}", "time") from None
            if limit is not None:
                spec["time_limit_s"] = limit
        priority = self.priority()
        if priority is not None:
            spec["priority"] = priority
        spec["command"] = command
        array = self.get("array")
        if array is not None:
            try:  # the size is checked from the text, nothing is expanded
                parse_array(array, max_size=self.max_array_size)
            except SpecError as e:
                raise self.err(f"{self.text('array')}: {e.reason}", "array") from None
        deps: tuple[tuple[str, str], ...] = ()
        if (d := self.get("dependency")) is not None:
            try:
                deps = parse_dependency(d)
            except ValueError as e:
                raise self.err(f"{self.text('dependency')}: {e}", "dependency") from None
        warnings = tuple(
            f"{self.source}: line {s.line}: {s.text} has no effect: {NO_EFFECT[n]}"
            for n, s in self.seen.items()
            if n in NO_EFFECT
        )
        return SbatchJob(
            spec, array, deps, self.get("output"), self.get("error"), warnings=warnings
        )

    def layout(self) -> tuple[int, int]:
        """(nodes, tasks per node) from --nodes, --ntasks-per-node and --ntasks."""
        nodes, per, total = self.count("nodes"), self.count("ntasks-per-node"), self.count("ntasks")
        if total is not None:
            if nodes is not None and per is not None and nodes * per != total:
                raise self.err(
                    f"{self.text('ntasks')} is not {self.text('nodes')} × "
                    f"{self.text('ntasks-per-node')} = {nodes * per}",
                    "ntasks",
                    "nodes",
                    "ntasks-per-node",
                )
            if per is None:
                nodes = nodes or 1  # Slurm packs tasks onto as few nodes as it can
                if total % nodes:
                    raise self.err(
                        f"{self.text('ntasks')} do not divide evenly over {self.text('nodes')}: "
                        "every gpufleet worker gets the same resources",
                        "ntasks",
                        "nodes",
                    )
                per = total // nodes
            elif nodes is None:
                if total % per:
                    raise self.err(
                        f"{self.text('ntasks')} is not a multiple of "
                        f"{self.text('ntasks-per-node')}",
                        "ntasks",
                        "ntasks-per-node",
                    )
                nodes = total // per
        return nodes or 1, per or 1

    def gpus(self, per_node: int, workers: int) -> tuple[int, list[str]]:
        """(GPUs per worker, GPU models named in the request)."""
        given = [n for n in ("gres", "gpus-per-node", "gpus", "gpus-per-task") if n in self.seen]
        if len(given) > 1:
            raise self.err(
                "give GPUs one way: " + " and ".join(self.text(n) for n in given) + " both ask",
                *given,
            )
        if not given:
            return 0, []  # Slurm gives no GPU unless asked
        name = given[0]
        value = self.get(name) or ""
        try:
            model, n = parse_gres(value) if name == "gres" else parse_gpu_count(value)
        except ValueError as e:
            raise self.err(f"{self.text(name)}: {e}", name) from None
        models = [self.model(model, name)] if model else []
        if name == "gpus-per-task":
            return n, models
        share, what = (per_node, "tasks per node") if name != "gpus" else (workers, "tasks")
        if n % share:
            names = (
                ("ntasks-per-node", "ntasks")
                if name != "gpus"
                else ("nodes", "ntasks-per-node", "ntasks")
            )
            layout = [x for x in names if x in self.seen]
            raise self.err(
                f"{self.text(name)} does not divide among {share} {what}: every gpufleet worker "
                f"(one per task) gets the same whole number of GPUs; change {self.text(name)} "
                "or the number of tasks",
                name,
                *layout,
            )
        return n // share, models

    def model(self, name: str, directive: str) -> str:
        m = catalog.find(name)
        if m is None:
            known = ", ".join(g.name for g in catalog.GPU_MODELS)
            raise self.err(
                f"{self.text(directive)}: {name!r} is not a GPU model (known: {known})", directive
            )
        return m.name

    def constraint(self, models: list[str]) -> list[str]:
        c = self.get("constraint")
        if c is None:
            return models
        if re.search(r"[&\[\]*!,]", c):
            raise self.err(
                f"{self.text('constraint')}: only GPU models joined by | are supported",
                "constraint",
            )
        named = [self.model(x.strip(), "constraint") for x in c.split("|") if x.strip()]
        if models and not set(models) <= set(named):
            raise self.err(
                f"{self.text('constraint')} excludes the GPU type the GPU request names",
                "constraint",
                "gres",
                "gpus",
                "gpus-per-node",
                "gpus-per-task",
            )
        return models or named

    def memory(self, per_node: int, cpus: int, gpus: int) -> int | None:
        given = [n for n in ("mem", "mem-per-cpu", "mem-per-gpu") if n in self.seen]
        if len(given) > 1:
            raise self.err(
                " and ".join(self.text(n) for n in given) + " are mutually exclusive", *given
            )
        if not given:
            return None
        name = given[0]
        try:
            mib = parse_memory(self.get(name) or "")
        except ValueError as e:
            raise self.err(f"{self.text(name)}: {e}", name) from None
        if mib == 0:
            raise self.err(
                f"{self.text(name)}: 0 means a whole node's memory in Slurm; give an amount", name
            )
        if name == "mem":
            return mib // per_node  # --mem is per node; a node's tasks share it
        if name == "mem-per-cpu":
            return mib * cpus
        if gpus == 0:
            raise self.err(f"{self.text(name)} but the job asks for no GPU", name)
        return mib * gpus

    def priority(self) -> int | None:
        p, nice = self.get("priority"), self.seen.get("nice")
        out: int | None = None
        if p is not None:
            if not re.fullmatch(r"-?\d+", p):
                raise self.err(f"{self.text('priority')}: expected a whole number", "priority")
            out = int(p)
        if nice is not None:
            v = nice.value if nice.value is not None else "100"  # Slurm's default adjustment
            if not re.fullmatch(r"[+-]?\d+", v):
                raise self.err(f"{nice.text}: expected a whole number", "nice")
            out = (out or 0) - int(v)
        return out


# ----- value formats (also used by the CLI's flags) ---------------------------------------

# Slurm's formats: the seconds each field counts for
_TIME_FORMATS: tuple[tuple[str, tuple[int, ...]], ...] = (
    (r"(\d+)", (60,)),  # minutes
    (r"(\d+):(\d+)", (60, 1)),  # minutes:seconds
    (r"(\d+):(\d+):(\d+)", (3600, 60, 1)),  # hours:minutes:seconds
    (r"(\d+)-(\d+)", (86400, 3600)),  # days-hours
    (r"(\d+)-(\d+):(\d+)", (86400, 3600, 60)),  # days-hours:minutes
    (r"(\d+)-(\d+):(\d+):(\d+)", (86400, 3600, 60, 1)),  # days-hours:minutes:seconds
)


def parse_time(text: str) -> float | None:
    """Seconds from any of Slurm's time formats; None for no limit (0, UNLIMITED, INFINITE)."""
    t = text.strip()
    if t.upper() in ("UNLIMITED", "INFINITE"):
        return None
    for pattern, weights in _TIME_FORMATS:
        m = re.fullmatch(pattern, t)
        if m:
            s = sum(int(x) * w for x, w in zip(m.groups(), weights, strict=True))
            return float(s) or None  # Slurm: a limit of 0 means none
    raise ValueError(
        "expected minutes, minutes:seconds, hours:minutes:seconds, days-hours, "
        "days-hours:minutes or days-hours:minutes:seconds"
    )


_MEM_UNITS = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}


def parse_memory(text: str) -> int:
    """MiB from Slurm's memory sizes: a number with K, M, G or T; a bare number is MB."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([KMGTkmgt])?(?:i?[Bb])?", text.strip())
    if not m:
        raise ValueError("expected a size such as 4096, 500M, 64G or 1T (a bare number is MB)")
    return math.ceil(float(m[1]) * _MEM_UNITS[(m[2] or "M").upper()])


def parse_gres(text: str) -> tuple[str | None, int]:
    """(GPU type or None, count) from ``gpu[:type][:N]``; other resources are refused."""
    parts = [p for p in text.split(",") if p]
    if len(parts) != 1 or not parts[0].startswith("gpu") or parts[0][3:4] not in ("", ":"):
        raise ValueError("only GPUs are supported: gpu:N or gpu:TYPE:N")
    fields = parts[0].split(":")[1:]
    n = int(fields.pop()) if fields and fields[-1].isdigit() else 1  # Slurm's default count
    if len(fields) > 1 or n < 1:
        raise ValueError("expected gpu:N or gpu:TYPE:N with N ≥ 1")
    return (fields[0] if fields else None), n


def parse_gpu_count(text: str) -> tuple[str | None, int]:
    """(GPU type or None, count) from ``[type:]N``."""
    m = re.fullmatch(r"(?:([\w.-]+):)?(\d+)", text.strip())
    if not m or int(m[2]) < 1:
        raise ValueError("expected N or TYPE:N with N ≥ 1")
    return m[1], int(m[2])


DEPENDENCY_TYPES = ("afterok", "afterany")


def parse_dependency(text: str) -> tuple[tuple[str, str], ...]:
    """``afterok:12:13,afterany:14`` → ((afterok, 12), (afterok, 13), (afterany, 14))."""
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
