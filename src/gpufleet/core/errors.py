"""The core's errors: an event the state contradicts, and the kind of contradiction, so that
callers map each kind to an answer by its type (``server/refusals.py``), never by its text."""

from __future__ import annotations


class ControllerError(ValueError):
    """An event that contradicts the state (a duplicate id, a change to something being
    deleted): refused, state kept."""


class UnknownObject(ControllerError):
    """An event that names a job, node or service the core does not hold."""
