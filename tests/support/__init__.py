"""Helpers every kind of test shares: ``waiting.wait_for`` (poll a state against a deadline)
and ``serving.serve_app`` (an ASGI app on uvicorn, in a thread, on a free port of 127.0.0.1)."""
