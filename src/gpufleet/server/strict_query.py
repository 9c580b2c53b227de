"""Unknown query parameters are refused, not ignored: ``GET /jobs?stat=RUNNING`` (a typo of
``state``) would otherwise list every job as if no filter were asked for, and the caller never
learn it. Each unknown name is told (422, ``query.NAME``), with the nearest known one, in the API's
one error shape; nothing is done. Added to every route as an app-wide dependency."""

from __future__ import annotations

from difflib import get_close_matches
from typing import Any

from fastapi import Request

from gpufleet.server.errors import FieldErrors

_KNOWN: dict[int, frozenset[str]] = {}  # per route object: the query names it declares


def known_names(route: object) -> frozenset[str] | None:
    """The query parameters ``route`` declares (its dependencies' too); None: not an API route."""
    dependant = getattr(route, "dependant", None)
    if dependant is None:
        return None
    names = _KNOWN.get(id(route))
    if names is None:
        names = _KNOWN[id(route)] = frozenset(_query_names(dependant))
    return names


def _query_names(dependant: Any) -> set[str]:
    names = {p.alias for p in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _query_names(sub)
    return names


async def known_query(request: Request) -> None:
    known = known_names(request.scope.get("route"))
    if known is None:
        return
    unknown = sorted({k for k in request.query_params if k not in known})
    if unknown:
        raise FieldErrors([(f"query.{k}", _unknown(k, known)) for k in unknown])


def _unknown(name: str, known: frozenset[str]) -> str:
    close = get_close_matches(name, sorted(known), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    listed = ", ".join(sorted(known)) or "none"
    return f"unknown query parameter{hint} (this operation takes: {listed})"
