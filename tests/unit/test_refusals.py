"""Refusals are typed (server/refusals.py): each kind has its status in one table, and an event
the core refused is heard by its type, never by its text."""

from __future__ import annotations

import pytest
from builders import cluster_spec, profile

from gpufleet.core.controller import Controller
from gpufleet.core.errors import ControllerError, UnknownObject
from gpufleet.core.events import JobCancelled, NodeDrain
from gpufleet.server.refusals import (
    STATUS,
    Conflict,
    Forbidden,
    InternalError,
    Invalid,
    NotFound,
    RequestError,
    Unavailable,
    of_core,
)


@pytest.mark.parametrize(
    ("kind", "status"),
    [
        (Forbidden, 403),
        (NotFound, 404),
        (Conflict, 409),
        (Invalid, 422),
        (InternalError, 500),
        (Unavailable, 503),
    ],
)
def test_each_kind_has_its_status(kind: type[RequestError], status: int) -> None:
    assert kind("why").status == status == STATUS[kind]


def test_the_core_s_refusals_by_their_type_not_their_words() -> None:
    assert isinstance(of_core(UnknownObject("no such thing")), NotFound)
    # a contradiction that happens to say "unknown" is still a conflict
    refused = of_core(ControllerError("unknown to nobody: it exists already"))
    assert isinstance(refused, Conflict) and refused.status == 409


def test_the_core_says_unknown_for_what_it_does_not_hold() -> None:
    core = Controller(profile(), cluster_spec(1, 8))
    _, refused = core.apply_events(0.0, [JobCancelled("nope", "x"), NodeDrain("ghost", True, "x")])
    assert [type(e) for _, e in refused] == [UnknownObject, UnknownObject]
