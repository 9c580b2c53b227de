"""Who may open a desktop's endpoint: its owner and the admins, each with their own gpufleet
token (``ServiceRoute.viewers``: the SHA-256 of each such token; the tokens themselves never
reach a proxy's config). A browser signs in once on the login page (``LOGIN``): the token is
POSTed in a form (never in a URL, so never in a log or a history) and comes back as an
HttpOnly, SameSite=Strict cookie scoped to the endpoint; scripts may send it as a bearer. The
credential is taken out of each request before it reaches the desktop (its own process).

Shared by the built-in proxy (``builtin.py``) and the HAProxy config (``haproxy.py``).
"""

from __future__ import annotations

import hashlib
import html
from urllib.parse import parse_qs

COOKIE = "gpufleet_desktop"
LOGIN = "/.gpufleet/login"
# where a signed-in browser goes: noVNC's page, connecting at once over its WebSocket
# (websockify serves it at /websockify), again after a drop (a restarted session), the
# remote screen scaled to the window
AFTER_LOGIN = (
    "/vnc.html?autoconnect=true&reconnect=true&reconnect_delay=1000&resize=scale&path=websockify"
)
FORM_MAX = 4096  # a login form's body: one token


def digest(token: str | bytes) -> str:
    """The SHA-256 of a token, lowercase hex (as the store keeps it: server/auth.py)."""
    raw = token.encode() if isinstance(token, str) else token
    return hashlib.sha256(raw).hexdigest()


def set_cookie(token: str) -> str:
    return f"{COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict"


def cookie_token(header: bytes | None) -> bytes | None:
    """Our cookie's value in a ``Cookie`` header, or None."""
    for part in (header or b"").split(b";"):
        name, sep, value = part.strip().partition(b"=")
        if sep and name == COOKIE.encode():
            return value.strip()
    return None


def without_cookie(header: bytes) -> bytes | None:
    """A ``Cookie`` header without ours (None: nothing else was in it)."""
    rest = [
        p.strip()
        for p in header.split(b";")
        if p.strip() and p.strip().partition(b"=")[0] != COOKIE.encode()
    ]
    return b"; ".join(rest) or None


def bearer(header: bytes | None) -> bytes | None:
    scheme, _, value = (header or b"").partition(b" ")
    return value.strip() if scheme.lower() == b"bearer" and value.strip() else None


def form_token(body: bytes) -> str:
    """The ``token`` field of a login form (application/x-www-form-urlencoded)."""
    values = parse_qs(body.decode("utf-8", "replace"), max_num_fields=4).get("token", [""])
    return values[0].strip()


def login_page(service: str, message: str = "") -> bytes:
    """The sign-in form (no script: the browser POSTs it)."""
    name = html.escape(service)
    said = f'<p class="error">{html.escape(message)}</p>' if message else ""
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{name} · gpufleet desktop</title>
<style>body{{font:15px system-ui,sans-serif;margin:4em auto;max-width:28em}}
input{{width:100%;padding:.5em;margin:.5em 0}}.error{{color:#b00020}}</style></head>
<body><h1>Desktop {name}</h1>{said}
<form method="post" action="{LOGIN}">
<label for="token">Your gpufleet token (GPUFLEET_TOKEN)</label>
<input id="token" name="token" type="password" autocomplete="off" autofocus required>
<button type="submit">Open the desktop</button></form></body></html>
""".encode()


def starting_page(service: str) -> bytes:
    """What a signed-in viewer sees while the desktop has no ready replica (starting, or
    resuming): a 503 that reloads itself, so the browser lands on the desktop once it is up."""
    name = html.escape(service)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" content="1">
<title>{name} · starting</title></head>
<body><p>Desktop {name} is starting; this page reloads by itself.</p></body></html>
""".encode()
