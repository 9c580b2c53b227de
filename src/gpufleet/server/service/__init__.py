"""The controller service, as its steps (``controller.py`` lists them)."""

from gpufleet.server.refusals import RequestError
from gpufleet.server.service.agents import task_event
from gpufleet.server.service.base import MIN_PASS_GAP_S
from gpufleet.server.service.controller import ControllerService
from gpufleet.server.service.links import NodeLink
from gpufleet.server.service.store import Store
from gpufleet.server.store import NewJob

__all__ = [
    "MIN_PASS_GAP_S",
    "ControllerService",
    "NewJob",
    "NodeLink",
    "RequestError",
    "Store",
    "task_event",
]
