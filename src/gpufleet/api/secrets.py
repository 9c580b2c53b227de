"""/secrets: what a client sends to make one and what it is ever shown (never a value)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field

from gpufleet.api.bounds import Name
from gpufleet.api.schemas import Input, Strict
from gpufleet.model.secrets import MAX_SECRET_NAME, MAX_SECRET_VALUE, NAME_PATTERN
from gpufleet.model.validate import text_problem

Scope = Literal["user", "queue", "cluster"]
SecretName = Annotated[str, Field(min_length=1, max_length=MAX_SECRET_NAME, pattern=NAME_PATTERN)]


def _value(v: str) -> str:
    problem = text_problem(v, MAX_SECRET_VALUE)  # its words never quote the value
    if problem:
        raise ValueError(problem)
    if not v:
        raise ValueError("must not be empty")
    return v


class SecretCreate(Input):
    name: SecretName
    scope: Scope = "user"
    user: Name | None = Field(
        None, description="scope user: whose secret (an admin token must say; a user's: its own)"
    )
    queue: Name | None = Field(None, description="scope queue: the queue whose jobs may use it")
    # repr=False: a log line or traceback that shows the request shows no value
    value: Annotated[str, AfterValidator(_value)] = Field(
        repr=False, description=f"the secret itself (at most {MAX_SECRET_VALUE} characters)"
    )
    replace: bool = Field(False, description="replace the value of an existing secret")


class SecretOut(Strict):
    name: str
    scope: Scope
    owner: str = Field(description="the user (scope user), the queue (queue), '' (cluster)")
    created_by: str
    created_time: float
    updated_time: float
    last_used_time: float | None = None
