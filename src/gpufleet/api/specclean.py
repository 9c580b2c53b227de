"""A submitted job spec's first check, with every problem at once: each string and number in it
(``bounds.json_problems``: a NUL byte, a lone surrogate, NaN, a number too large) and, when
there are such, the model's reading of the rest of it too (a control character in the name, a
negative count), so that one 422 names them all instead of the first kind alone. A spec with
none goes on unchanged to ``JobSpec.from_dict`` (``server/submitting.py``)."""

from __future__ import annotations

import re
from typing import Any

from pydantic import AfterValidator

from gpufleet.api.bounds import Problems, json_problems, safe
from gpufleet.model.job import JobSpec

_TOP = re.compile(r"[.\[]")


def _top(path: str) -> str:
    """The spec's key a problem's path is under (``env.FOO`` → ``env``)."""
    return _TOP.split(path, maxsplit=1)[0]


def spec_problems(spec: dict[str, Any]) -> list[tuple[str, str]]:
    """Every problem of ``spec`` the model's reader and the value checks find, each with its
    path below the spec; none when its strings and numbers are all fit (then the reader runs
    later, with the submitting user, and says what else is wrong)."""
    problems = json_problems(spec)
    if not problems or any(not p for p, _ in problems):  # too large to read at all
        return problems
    bad = {_top(p) for p, _ in problems}
    # each key with a problem of its own is left out (its default, or a placeholder, read)
    rest = {k: v for k, v in spec.items() if safe(str(k)[:100]) not in bad}
    if rest.get("user") is None:
        rest["user"] = "user"  # the submitting token's, filled in later
    _, more = JobSpec.read_all(rest, source="request")
    return problems + [(e.field, e.reason) for e in more if e.field and _top(e.field) not in bad]


def _clean_spec(v: dict[str, Any]) -> dict[str, Any]:
    problems = spec_problems(v)
    if problems:
        raise Problems(problems)
    return v


CleanSpec = AfterValidator(_clean_spec)
