"""An ASGI app served for real: uvicorn in a daemon thread, on a port of 127.0.0.1 the kernel
picked, lifespan on (the controller's loop runs). Stopping it waits for the server's own
shutdown, so the next test never sees its loop still running."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from typing import Any

import uvicorn

from support.waiting import wait_for


@contextlib.contextmanager
def serve_app(app: Any, **config: Any) -> Iterator[str]:
    """``app`` served until the block ends; yields its base URL (``http://127.0.0.1:PORT``).
    ``config``: other ``uvicorn.Config`` settings."""
    config = {"log_level": "warning", "access_log": False, "lifespan": "on", **config}
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, **config))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        wait_for("the server started", lambda: server.started or not thread.is_alive(), 30)
        assert thread.is_alive(), "the server did not start"
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()
