"""A job's own metrics on the wire (model/jobmetrics.py reads the file): from its agent in an
``AgentEvent`` of kind "metrics", and out in ``JobOut.metrics``."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from gpufleet.api.bounds import Text
from gpufleet.model import jobmetrics as jm


def _names(v: dict[str, float]) -> dict[str, float]:
    bad = [k for k in v if not jm.NAME.match(k)]
    if bad:
        raise ValueError(f"{bad[0][:64]!r} is not a metric name ([A-Za-z_][A-Za-z0-9_]*)")
    return v


Value = Annotated[float, Field(allow_inf_nan=False, ge=-jm.MAX_VALUE, le=jm.MAX_VALUE)]
MetricValues = Annotated[dict[str, Value], Field(max_length=jm.MAX_METRICS), AfterValidator(_names)]
MetricProblems = Annotated[list[Text], Field(max_length=jm.MAX_PROBLEMS)]


class JobMetricsIn(BaseModel):
    """An agent's report of a task's metrics file: its metrics and what in it was refused."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)

    values: MetricValues = {}
    problems: MetricProblems = []


class JobMetricsOut(BaseModel):
    """What the job's metrics file said last (rank 0's, its newest attempt's), and when the
    controller heard it (its clock); ``problems``: what in it was refused."""

    model_config = ConfigDict(extra="forbid")

    values: dict[str, float]
    problems: list[str] = []
    at: float
