"""The bounds of every value that comes in over the API: annotated types for the schemas and
the routers' path and query parameters, and one walk over free-form JSON (a job spec, metrics).

The rules themselves are ``gpufleet.model.validate``'s (the YAML loaders, ``#SBATCH`` scripts
and the CLI read with the same ones): no NUL byte, no lone surrogate, a length per kind of
string, finite numbers of a sane size. A refusal is a ValueError; ``Problems`` carries several,
each with the path below the value, so that one 422 lists them all."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import AfterValidator, Field

from gpufleet.model.queue import queue_name_problem
from gpufleet.model.validate import (
    MAX_NAME,
    MAX_NUMBER,
    MAX_TEXT,
    control_problem,
    text_problem,
)

INT64_MAX = 2**63 - 1
MAX_DEPTH = 32  # nesting of free-form JSON
MAX_KEYS = 4096  # values in one free-form document


class Problems(ValueError):
    """Several refusals inside one value: (path below it, message)."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        self.problems = problems
        super().__init__("; ".join(f"{p}: {m}" if p else m for p, m in problems))


def _text(max_len: int) -> Any:
    def check(v: str) -> str:
        problem = text_problem(v, max_len)
        if problem:
            raise ValueError(problem)
        return v

    return AfterValidator(check)


def _nonblank(v: str) -> str:
    if not v.strip():
        raise ValueError("must not be empty or blank")
    return v


def _no_control(v: str) -> str:
    if problem := control_problem(v):
        raise ValueError(problem)
    return v


# stored text that other people's terminals print (squeue, sinfo, scontrol, a user's refusal
# naming a queue): an escape sequence in it would run there (model.validate.control_problem)
NoControl = AfterValidator(_no_control)


def _queue_name(v: str) -> str:
    if problem := queue_name_problem(v):
        raise ValueError(problem)
    return v


# A name: of a node, a queue, a token, a user, a GPU model. Lengths are checked by the
# validator (not max_length) so the message is the same one the model's readers give.
Name = Annotated[str, _text(MAX_NAME), AfterValidator(_nonblank), NoControl]
OptName = Annotated[str, _text(MAX_NAME), NoControl]  # may be empty ("" = not set)
# a queue's name as an admin creates it: one a Slurm partition can have (model/queue.py)
QueueName = Annotated[Name, AfterValidator(_queue_name)]
Text = Annotated[str, _text(MAX_TEXT)]  # an address, a message
Line = Annotated[str, _text(MAX_TEXT), NoControl]  # one line others see: a reason, a hostlist
# why a task ended or a node is unhealthy, as an agent words it: generous, so that an agent
# building its own report never trips over it
Reason = Annotated[str, _text(64 * 1024)]
LogText = Annotated[str, _text(1 << 20)]  # a chunk of a log (the body limit bounds it too)
Finite = Annotated[float, Field(allow_inf_nan=False, ge=-MAX_NUMBER, le=MAX_NUMBER)]
NonNegative = Annotated[float, Field(allow_inf_nan=False, ge=0, le=MAX_NUMBER)]
Int64 = Annotated[int, Field(ge=-INT64_MAX - 1, le=INT64_MAX)]
Count = Annotated[int, Field(ge=0, le=INT64_MAX)]  # an offset, an index, an attempt
SmallCount = Annotated[int, Field(ge=0, le=1 << 20)]  # a rank, a GPU index


def json_problems(value: Any, path: str = "") -> list[tuple[str, str]]:
    """Every string (keys too) and number in ``value`` that breaks the rules, with its path
    (``env.FOO``, ``command[1]``); bounded in depth and size."""
    out: list[tuple[str, str]] = []
    seen = 0

    def walk(v: Any, p: str, depth: int) -> None:
        nonlocal seen
        seen += 1
        if seen > MAX_KEYS:
            if seen == MAX_KEYS + 1:
                out.append((path, f"must hold at most {MAX_KEYS} values"))
            return
        if depth > MAX_DEPTH:
            out.append((p, f"must nest at most {MAX_DEPTH} levels deep"))
            return
        if isinstance(v, str):
            # a spec's command may carry a probe program; the model bounds each field's length
            problem = text_problem(v, 1 << 20)
            if problem:
                out.append((p, problem))
        elif isinstance(v, bool) or v is None:
            pass
        elif isinstance(v, float):
            if not math.isfinite(v):
                out.append((p, f"must be a finite number, got {v}"))
            elif abs(v) > MAX_NUMBER:
                out.append((p, f"must be at most {MAX_NUMBER:g} in size, got {v:g}"))
        elif isinstance(v, int):
            if abs(v) > INT64_MAX:
                out.append((p, f"must fit in 64 bits, got a {v.bit_length()}-bit number"))
        elif isinstance(v, Mapping):
            for k, x in v.items():
                key = str(k)
                problem = text_problem(key, MAX_NAME)
                shown = safe(key[:100])
                if problem:
                    out.append((f"{p}.{shown}" if p else shown, f"the key {problem}"))
                walk(x, f"{p}.{shown}" if p else shown, depth + 1)
        elif isinstance(v, list):
            for i, x in enumerate(v):
                walk(x, f"{p}[{i}]", depth + 1)

    walk(value, path, 0)
    return out


def _clean_json(v: Any) -> Any:
    problems = json_problems(v)
    if problems:
        raise Problems(problems)
    return v


# Free-form JSON (a job spec before the model reads it, an agent's metrics): every value in
# it is checked, and each refusal names its own path.
CleanJson = AfterValidator(_clean_json)


def safe(text: str) -> str:
    """``text`` as it may go into a response: a lone surrogate cannot be encoded as UTF-8, so
    it is shown escaped (``\\ud800``) instead of failing the response."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")
