"""The typed Python SDK of the REST API (httpx). The CLI and the agent talk to a server only
through this; tests inject ``transport=`` (an ``httpx.MockTransport`` or an ASGI transport)
instead of patching."""

from gpufleet.client.http import AgentClient, ApiError, Client

__all__ = ["AgentClient", "ApiError", "Client"]
