"""``gpufleet validate``: layered acceptance of a running cluster, through its API and probe jobs.

Layers, in order: ``device``, ``network``, ``storage``, ``clock``, ``scheduler``, ``application``,
``monitoring`` (the seeds' 上线验证 checklist plus the clock). Every check is a row with what was
measured on what, what was expected, and PASS / WARN / FAIL / SKIP (``checks``); ``runner``
runs the layers; ``report`` renders Markdown, HTML or JSON. Nothing here talks to a node
directly: what the API does not say, a job that the scheduler places on the node finds out
(``gpufleet.ops.probes``)."""

from gpufleet.ops.validate.checks import LAYERS, Check, Report, Status
from gpufleet.ops.validate.runner import parse_layers, validate
from gpufleet.ops.validate.settings import Settings

__all__ = ["LAYERS", "Check", "Report", "Settings", "Status", "parse_layers", "validate"]
