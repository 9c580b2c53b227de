"""sbatch's options, each set in order (a later one wins, as in sbatch) and its value checked
as sbatch checks it; then the pairs sbatch refuses together. The result is the fields of a
:class:`~gpufleet.io.sbatch.request.SlurmRequest` before sbatch's counts (``verify``)."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from gpufleet.io import slurm_values as v
from gpufleet.io.sbatch.request import where
from gpufleet.io.slurm_opts import Given, Problem
from gpufleet.model.arrays import parse_array
from gpufleet.model.errors import SpecError

_T = TypeVar("_T")

# What gpufleet acts on; every other option sbatch accepts is read, kept, and warned about.
HONOURED = {
    "job-name", "nodes", "ntasks", "ntasks-per-node", "cpus-per-task", "cpus-per-gpu", "gres",
    "gpus", "gpus-per-node", "gpus-per-task", "mem", "mem-per-cpu", "mem-per-gpu", "time",
    "partition", "array", "dependency", "priority", "nice", "constraint", "signal", "requeue",
    "no-requeue", "exclusive", "nodelist", "exclude", "output", "error", "open-mode", "chdir",
    "export", "export-file", "input", "reservation", "kill-on-invalid-dep", "hold",
    "container-image", "container-mounts", "container-workdir",  # NVIDIA pyxis's (SPANK)
    "begin",
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


def read_options(
    given: Sequence[Given], max_array_size: int
) -> tuple[dict[str, Any], dict[str, Given], list[Problem]]:
    """(the request's fields by name, the last time each option was given, problems)."""
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
    problems += _exclusions(last)
    if "array" in last and f.get("array") is not None:
        try:
            parse_array(f["array"], max_size=max_array_size)
        except SpecError as e:
            bad(last["array"], f"Invalid --array specification: {e.reason}")
    if "hint" in last and any(k in last for k in ("ntasks-per-core", "threads-per-core")):
        f["hint"] = ()  # sbatch ignores --hint beside these
    return f, last, problems


def _exclusions(last: dict[str, Given]) -> list[Problem]:
    """The options sbatch refuses together, and those only root may give."""
    problems: list[Problem] = []

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
    return problems


def no_effect_warnings(last: dict[str, Given], source: str) -> tuple[str, ...]:
    """One warning for each option given that gpufleet does not act on, in line order."""
    return tuple(
        f"{where(source, g.line)}{g.text} has no effect here: "
        f"{NO_EFFECT.get(key, DEFAULT_NO_EFFECT)}"
        for key, g in sorted(last.items(), key=lambda kv: kv[1].line)
        if key not in HONOURED
    )


_KEEP_TEXT = {
    "job-name": "job_name", "array": "array", "constraint": "constraint",
    "nodelist": "nodelist", "exclude": "exclude", "chdir": "chdir", "export": "export",
    "account": "account", "qos": "qos", "mail-user": "mail_user", "input": "input",
    "export-file": "export_file", "reservation": "reservation",
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
        f[_MEMORY[key]] = _spec(key, v.mbytes, v.SIZE_FORMS, text)
    elif key in _GPUS:
        f[_GPUS[key]] = v.gpu_list(text)
    elif key in _POSITIVE:
        f.setdefault("other", {})[key] = str(v.parse_int(text))
    elif key == "nodes":
        f["nodes"] = v.node_count(text)
    elif key in ("time", "time-min"):
        f[key.replace("-", "_")] = _spec(key, v.time_minutes, v.TIME_FORMS, text)
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
    elif key == "kill-on-invalid-dep":
        if text.lower() not in ("yes", "no"):
            raise ValueError("Invalid --kill-on-invalid-dep specification")
        f["kill_on_invalid_dep"] = text.lower() == "yes"
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
    elif key == "begin":  # the submitter's now: sbatch reads it as it submits
        import time

        from gpufleet.io.slurm_begin import BEGIN_FORMS, begin_time

        f["begin_time"] = _spec(key, lambda t: begin_time(t, time.time()), BEGIN_FORMS, text)
    else:
        _check_other(key, val)
        f.setdefault("other", {})[key] = val


def _spec(key: str, parse: Callable[[str], _T], forms: str, text: str) -> _T:
    """``parse(text)``, or sbatch's own refusal, "Invalid --KEY specification", and the
    ``forms`` it takes (the option and its value are already in front of the message)."""
    try:
        return parse(text)
    except ValueError:
        raise ValueError(f"Invalid --{key} specification: expected {forms}") from None


def _check_other(key: str, val: str | None) -> None:
    """The checks sbatch makes on options gpufleet only keeps."""
    text = val or ""
    if key in ("delay-boot",):
        _spec(key, v.time_seconds, v.TIME_FORMS, text)
    elif key in ("tmp",):
        _spec(key, v.mbytes, v.SIZE_FORMS, text)
    elif key == "core-spec":
        v.parse_int(text, positive=False)
    elif key == "oom-kill-step" and val is not None and text not in ("0", "1"):
        raise ValueError("Invalid --oom-kill-step specification: expected 0 or 1")
    elif key == "wait-all-nodes":
        if v.parse_int(text, positive=False) > 1:
            raise ValueError("Invalid --wait-all-nodes specification")
    elif key == "no-kill" and val is not None and text.lower() not in ("set", "off", "no"):
        raise ValueError("Invalid --no-kill specification")
    elif key == "switches":
        count, _, wait = text.partition("@")
        v.parse_int(count)
        if wait:
            v.time_seconds(wait)
    elif key == "get-user-env" and val is not None:
        if not re.fullmatch(r"-?[0-9]*[SsLl]?", text):
            raise ValueError("Invalid --get-user-env specification")
    elif key == "distribution" and not _distribution(text):
        raise ValueError("Invalid --distribution specification")
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


def _distribution(text: str) -> bool:
    """Whether sbatch takes ``-m text``: ``plane=N``, or up to three of node (``block``,
    ``cyclic``, ``arbitrary``), socket and core (``block``, ``cyclic``, ``fcyclic``) joined by
    ``:`` (``*``: the default), any case, with ``,Pack`` or ``,NoPack``; or ``Pack``/``NoPack``
    alone (what Slurm 22.05 took and refused, exit 255: tests/unit/test_sbatch_begin.py)."""
    t = text.lower()
    if t in ("pack", "nopack"):
        return True
    t = t.removesuffix(",pack").removesuffix(",nopack")
    if t.startswith("plane="):
        return (t[6:].isascii() and t[6:].isdigit()) and int(t[6:]) > 0
    parts = t.split(":")
    levels = ({"block", "cyclic", "arbitrary", "*"}, *[{"block", "cyclic", "fcyclic", "*"}] * 2)
    return len(parts) <= 3 and all(p in ok for p, ok in zip(parts, levels, strict=False))
