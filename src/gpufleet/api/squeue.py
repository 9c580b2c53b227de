"""``POST /squeue``'s body and answer: squeue's command line as typed, and what squeue prints
(issue 27: the controller lists and prints, so that the ``squeue`` shim imports next to
nothing)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from gpufleet.api.bounds import Name, Text
from gpufleet.api.schemas import Input, Strict
from gpufleet.model.validate import MAX_COMMAND, MAX_ITEMS


class SqueueRun(Input):
    argv: list[Annotated[str, Field(max_length=MAX_COMMAND)]] = Field(max_length=MAX_ITEMS)
    me: Text | None = Field(None, description="the Unix user who typed it (squeue's --me)")


class SqueueAnswer(Strict):
    """What squeue prints: ``out`` on stdout, each of ``errors`` as ``squeue: error: …`` on
    stderr, and its exit status."""

    out: str
    errors: list[str]
    code: int


class JobsTable(Input):
    """``POST /jobs/table``: ``gpufleet jobs``'s listing as its command line selects it (the
    command reads its options: ``cli/listing.py``), for a pipe ``width`` characters wide."""

    user: Name | None = None
    queue: Name | None = None
    states: list[Name] | None = Field(None, max_length=MAX_ITEMS, description="any of these")
    job_ids: Text | None = None
    names: Text | None = None
    limit: int = Field(200, ge=1, le=10_000)
    all: bool = Field(False, description="ended jobs too")
    width: int = Field(240, ge=1, le=100_000, description="the reader's COLUMNS")


class JobsTableOut(Strict):
    out: str = Field(description="the table, as gpufleet jobs prints it to a pipe; empty: no jobs")
    jobs: int
