"""``POST /jobs/{id}/hold``'s body: Slurm's ``scontrol hold``, ``uhold`` or ``release`` of a job
(ADR 0074)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from gpufleet.api.schemas import Input

HoldAction = Literal["hold", "uhold", "release"]


class JobHoldRequest(Input):
    action: HoldAction = Field(
        description="hold: an admin's hold when an admin asks (JobHeldAdmin), else the user's "
        "(JobHeldUser); uhold: the user's hold; release: no hold (an admin's hold only by an "
        "admin), as Slurm's scontrol hold, uhold and release"
    )
