"""A queue as GET /queues shows it, and what PUT /queues/{name} may change (model/queue.py)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidatorFunctionWrapHandler,
    WrapValidator,
)

from gpufleet.api.bounds import Line, Name, OptName
from gpufleet.api.idle import IdlePolicyOut

# a queue's pack_encoders as PUT sets it: "default" takes the queue's own setting away (then
# the pool's, else the controller's --pack-encoders decides: ADR 0062)


def _one_of(v: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    """One clear problem, not one per member of the union."""
    try:
        return handler(v)
    except ValidationError:
        raise ValueError('must be true, false or "default"') from None


PackEncoders = Annotated[bool | Literal["default"], WrapValidator(_one_of)]


def _modes(v: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    try:
        return handler(v)
    except ValidationError:
        raise ValueError('must be a list of "timeslice" and "mps" (empty: any)') from None


# a queue's ways of sharing a GPU as PUT sets them (model/replicas.py's SHARING_MODES; ADR 0064)
GpuSharing = Annotated[
    list[Literal["timeslice", "mps"]], Field(max_length=2), WrapValidator(_modes)
]


class QueueOut(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    cohort: str
    weight: float
    quota_gpus: float | None
    used_gpus: float
    borrowing: bool
    pending: int
    running: int
    dominant_share: float
    fair_share_usage: float  # decayed past usage, share·s
    # the longest a preemption waits for a job's checkpoint (its notice's grace, capped)
    preempt_grace_max_s: float = 300.0
    priority_max: int | None = None  # the highest priority a job of the queue may have
    idle: IdlePolicyOut | None = None  # what is done with jobs whose GPUs sit idle; None: nothing
    defrag: dict[str, float | bool] | None = None  # its gangs' changes to defrag's policy
    # whether its video jobs may use training GPUs' encoders; None: the pool's, else the flag's
    pack_encoders: bool | None = None
    # the ways of sharing a GPU its jobs' shares may run under; empty: any
    gpu_sharing: list[str] = []
    # the node labels its jobs' nodes carry, all of them (its node set); empty: every node
    nodes: dict[str, str] = {}


class QueueUpdate(BaseModel):
    """A request body: every field bounded, NaN and infinities refused, no type guessed (as
    ``schemas.Input``)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)

    weight: float | None = Field(None, gt=0, le=1e6)
    cohort: OptName | None = None
    quota_gpus: float | None = Field(None, ge=0, le=1e9)  # GPUs, in milli-GPUs an int64
    preempt_grace_max_s: float | None = Field(
        None, ge=0, le=0xFFFF, description="the cap on a preempted job's checkpoint grace"
    )
    priority_max: int | None = Field(
        None, ge=0, le=1_000_000, description="the highest priority a job of the queue may have"
    )
    pack_encoders: PackEncoders | None = Field(
        None,
        description="true: its video jobs may use the encoders of GPUs training holds (not "
        "on a pool that says false); false: never, nor beside its own jobs; 'default': as the "
        "pool, else the controller's --pack-encoders, says",
    )
    gpu_sharing: GpuSharing | None = Field(
        None,
        description="the ways of sharing a GPU its jobs' GPU shares may run under (the nodes' "
        "gpufleet.io/gpu-sharing): timeslice, mps; [] takes the limit away",
    )
    nodes: dict[Name, Line] | None = Field(
        None,
        max_length=64,
        description="its node set: its jobs run only on nodes carrying all of these labels "
        "(Slurm's partition Nodes=); {} takes the set away (every node)",
    )
