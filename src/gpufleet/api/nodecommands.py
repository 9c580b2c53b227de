"""The REST API's wire schemas for operator commands run on a node through its agent
(``/nodes/{name}/commands``, server/routers/nodecommands.py; the agent's side is
agent/nodecommand.py). An admin's command runs as the agent's user (root on a real node), its
output captured (the last ``MAX_OUTPUT`` bytes), its exit code kept, bounded in time."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from gpufleet.api.bounds import Int64, Line, Reason, Text
from gpufleet.api.schemas import Input, Strict

MAX_TIMEOUT_S = 7 * 86400.0
MAX_COMMAND = 16 * 1024  # characters of a shell command
MAX_OUTPUT = 64 * 1024  # the output's last bytes kept (stdout and stderr together)
# what the agent is asked to do: "exec" a shell command; "validate" the node with gpufleet
# validate's on-node layers (its own interpreter; ``command`` names the layers); "restart"
# itself (an upgrade; ``command``: the new install's interpreter, "" its own)
Kind = Literal["exec", "validate", "restart"]
# queued: stored, not yet taken by the agent; running: taken (the agent runs it); done: its
# exit code is known; failed: it could not run or its end is unknown (the agent said why)
State = Literal["queued", "running", "done", "failed"]


class NodeCommandCreate(Input):
    command: Annotated[str, Field(min_length=1, max_length=MAX_COMMAND)]
    timeout_s: Annotated[float, Field(gt=0, le=MAX_TIMEOUT_S)] = 600.0
    why: Line = ""


class NodeCommandOut(Strict):
    id: str
    node: str
    kind: str
    command: str
    timeout_s: float
    state: str
    exit_code: int | None = None
    output: str = ""
    why: str = ""  # the request's reason; at the end, what the agent said (timed out, ...)
    requested_by: str = ""
    created: float
    started: float | None = None
    ended: float | None = None


class NodeCommandResult(Input):
    """The agent's report of one command's end (sent until the controller has it)."""

    id: Annotated[str, Field(min_length=1, max_length=64)]
    exit_code: Int64
    output: Reason = ""
    why: Text = ""  # "timed out after 600 s", "the agent restarted while it ran", ...
    started: Annotated[float, Field(ge=0, le=1e11)] = 0.0
    ended: Annotated[float, Field(ge=0, le=1e11)] = 0.0
    failed: bool = False  # it could not run, or its end is unknown: no exit code of its own
