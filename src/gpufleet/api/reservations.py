"""The REST API's wire schemas for advance reservations (maintenance windows): ``/reservations``
(server/routers/reservations.py), as Slurm's ``scontrol create|show|delete reservation``."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from gpufleet.api.bounds import Line, Name
from gpufleet.api.schemas import Input, Strict

MAX_DURATION_S = 366 * 86400.0  # a year and a day: a window, not a partition
MAX_USERS = 1000


class ReservationCreate(Input):
    nodes: Annotated[Line, Field(min_length=1)]  # a hostlist: node-[3-6],gpu07
    start: Annotated[float, Field(ge=0, le=1e11)]  # seconds since the epoch
    duration_s: Annotated[float, Field(gt=0, le=MAX_DURATION_S)]
    users: Annotated[list[Name], Field(default_factory=list, max_length=MAX_USERS)]
    maint: bool = False  # a maintenance window (Slurm's flags=maint)
    # default: the creator's name and a number, as Slurm names them (root_1)
    name: Annotated[Name, Field(max_length=63, pattern=r"^[A-Za-z0-9_.-]+$")] | None = None


class ReservationOut(Strict):
    name: str
    nodes: str  # the hostlist (node-[3-6])
    node_count: int
    start: float
    end: float
    duration_s: float
    users: list[str]
    maint: bool
    state: str  # ACTIVE while the window is open, else INACTIVE (as scontrol shows it)
    created_by: str
    # running jobs on its nodes whose time limit crosses its start (they are not stopped: an
    # admin decides; Slurm refuses such a reservation unless flags=ignore_jobs)
    jobs_crossing: list[str] = Field(default_factory=list)
