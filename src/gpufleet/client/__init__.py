"""The typed Python SDK of the REST API (httpx). The CLI and the agent talk to a server only
through this; tests inject ``transport=`` (an ``httpx.MockTransport`` or an ASGI transport)
instead of patching.

``Client`` and its kin are imported on first use (PEP 562), so that the package's light
modules (``errors``, ``lean``: the Slurm shims') do not pay for httpx and pydantic (issue 12)."""

from __future__ import annotations

from gpufleet.client.errors import ApiError

TYPE_CHECKING = False  # no typing at run time: the shims import this package (issue 27)
if TYPE_CHECKING:
    from typing import Any

    from gpufleet.client.http import AgentClient, Client

__all__ = ["AgentClient", "ApiError", "Client"]


def __getattr__(name: str) -> Any:
    if name in ("AgentClient", "Client"):
        from gpufleet.client import http

        return getattr(http, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
