"""The core's one error: an event the state contradicts."""

from __future__ import annotations


class ControllerError(ValueError):
    """An event that contradicts the state (unknown job, duplicate id): refused, state kept."""
