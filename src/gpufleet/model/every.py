"""Every problem of an input in one pass: a reader that stops at the first problem (a
``SpecError`` naming its field) is run again on the input without that field, until it reads
the rest; the problems found on the way are the answer, each with its field. A field left out
takes its default, which is valid, so a problem is never the echo of an earlier one; a
required field left out is given a placeholder, so that the other fields are still read."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from gpufleet.model.errors import SpecError, each

T = TypeVar("T")
_SEGMENT = re.compile(r"\[(\d+)\]|([^.\[\]]+)")
MAX_ROUNDS = 64  # more problems than anyone fixes in one go


def every_problem(
    read: Callable[[Any], T],
    data: Any,
    *,
    path: str = "",
    placeholders: Mapping[str, Any] | None = None,
) -> tuple[T | None, list[SpecError]]:
    """(what ``read`` makes of ``data`` without its faulty fields, or None when it cannot be
    read at all; every problem found). ``path``: the prefix of the reader's field names;
    ``placeholders``: values for required fields, by name, when one is missing."""
    try:
        return read(data), []  # the usual case: nothing copied
    except SpecError as e:
        found = list(each(e))
    problems: list[SpecError] = []
    current = copy.deepcopy(data)
    for _ in range(MAX_ROUNDS):
        told = {x.field for x in problems}
        # each field told once (a field left out and then missing is the same problem); one
        # that names no field, after others, is theirs (a cluster left with no nodes)
        problems += [x for x in found if x.field not in told and (x.field or not problems)]
        fields = [segments_of(x.field, path) for x in found]
        if not all(_leave_out(current, f, placeholders or {}) for f in fields):
            break
        try:
            return read(current), problems
        except SpecError as e:
            found = list(each(e))
    return None, problems


def segments_of(field: str, path: str) -> list[str | int]:
    """``jobs[0].topology.level`` under path ``jobs[0]`` (or ``topology.level``) as
    ``["topology", "level"]``."""
    if path and (field == path or field.startswith((f"{path}.", f"{path}["))):
        field = field[len(path) :].lstrip(".")  # else it is already relative
    return [int(i) if i else name for i, name in _SEGMENT.findall(field)]


def _leave_out(data: Any, segments: list[str | int], placeholders: Mapping[str, Any]) -> bool:
    """Take out of ``data`` the part that ``segments`` names (or the value under which it
    would be, when that is not a mapping or list: ``topology: nodd`` for ``topology.level``);
    a required field that is missing gets its placeholder. False when nothing changed: a
    missing field without one ends the reading there."""
    if not segments or not isinstance(data, dict):
        return False
    parent: Any = None
    key: str | int | None = None
    node: Any = data
    item: tuple[list[Any], int] | None = None  # the list item it is in, the innermost
    for seg in segments:
        in_map = isinstance(node, dict) and isinstance(seg, str) and seg in node
        in_list = isinstance(node, list) and isinstance(seg, int) and 0 <= seg < len(node)
        if not (in_map or in_list):
            if not isinstance(node, dict | list):
                break  # a value of the wrong kind where a mapping was expected: it goes
            if item is None:  # a required key that is not there
                return _placeholder(data, segments, placeholders)
            del item[0][item[1]]  # the item cannot be read without it: the others can
            return True
        if in_list and isinstance(seg, int):
            item = (node, seg)
        parent, key, node = node, seg, node[seg]
    if node is None and parent is data:  # given as null: as if not given
        return _placeholder(data, segments, placeholders)
    del parent[key]
    return True


def _placeholder(
    data: dict[str, Any], segments: list[str | int], values: Mapping[str, Any]
) -> bool:
    name = segments[0]
    if len(segments) == 1 and isinstance(name, str) and name in values and data.get(name) is None:
        data[name] = copy.deepcopy(values[name])
        return True
    return False
