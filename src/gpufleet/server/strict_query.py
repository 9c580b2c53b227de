"""Unknown query parameters are refused, not ignored: ``GET /jobs?stat=RUNNING`` (a typo of
``state``) would otherwise list every job as if no filter were asked for, and the caller never
learn it. Each unknown name is told (422, ``query.NAME``), with the nearest known one, in the API's
one error shape; nothing is done. Nor is a parameter that takes one value given twice
(``?user=alice&user=bob``: FastAPI keeps the last, a proxy or a log may read the first), as a
JSON key given twice is not (``strictjson.py``). Added to every route as an app-wide dependency."""

from __future__ import annotations

from difflib import get_close_matches
from typing import Any

from fastapi import Request
from fastapi._compat.shared import field_annotation_is_sequence

from gpufleet.server.errors import FieldErrors

_KNOWN: dict[int, frozenset[str]] = {}  # per route object: the query names it declares
_LISTS: dict[int, frozenset[str]] = {}  # per route object: those that take a list of values


def known_names(route: object) -> frozenset[str] | None:
    """The query parameters ``route`` declares (its dependencies' too); None: not an API route."""
    dependant = getattr(route, "dependant", None)
    if dependant is None:
        return None
    names = _KNOWN.get(id(route))
    if names is None:
        names = _KNOWN[id(route)] = frozenset(_query_names(dependant))
    return names


def _query_names(dependant: Any, lists: bool = False) -> set[str]:
    names = {
        p.alias
        for p in dependant.query_params
        if not lists or field_annotation_is_sequence(p.field_info.annotation)
    }
    for sub in dependant.dependencies:
        names |= _query_names(sub, lists)
    return names


async def known_query(request: Request) -> None:
    known = known_names(request.scope.get("route"))
    if known is None:
        return
    unknown = sorted({k for k in request.query_params if k not in known})
    problems = [(f"query.{k}", _unknown(k, known)) for k in unknown]
    items = request.query_params.multi_items()
    if len(items) > len(request.query_params):  # a name given more than once
        route = request.scope["route"]
        lists = _LISTS.get(id(route))
        if lists is None:
            lists = _LISTS[id(route)] = frozenset(_query_names(route.dependant, lists=True))
        counts: dict[str, int] = {}
        for k, _ in items:
            counts[k] = counts.get(k, 0) + 1
        problems += [
            (f"query.{k}", f"given {n} times; it takes one value")
            for k, n in sorted(counts.items())
            if n > 1 and k in known and k not in lists
        ]
    if problems:
        raise FieldErrors(problems)


def _unknown(name: str, known: frozenset[str]) -> str:
    close = get_close_matches(name, sorted(known), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    listed = ", ".join(sorted(known)) or "none"
    return f"unknown query parameter{hint} (this operation takes: {listed})"
