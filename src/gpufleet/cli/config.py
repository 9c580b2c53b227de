"""Where the CLI finds its server, token and CA, and the one place that builds its Client.

Precedence: ``--server``/``--token-file``/``--ca`` flags, then ``GPUFLEET_SERVER``,
``GPUFLEET_TOKEN`` (or ``GPUFLEET_TOKEN_FILE``) and ``GPUFLEET_CA``, then the config file
(``$GPUFLEET_CONFIG`` or ``~/.config/gpufleet/config.yaml``) with ``server:``, ``token:`` or
``token_file:``, and ``ca:``, then the host's ``/etc/gpufleet/client.yaml`` (``server:`` and
``ca:`` only, written by ``gpufleet setup``). A token is never taken from the command line
(every local user can read it in ``ps``), and a token file, or a config file holding a token,
must be private (0600). Every command talks to the server through ``connect``, which turns
refusals and unreachable servers into one line that says what to do.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Annotated

import httpx
import pydantic
import typer

from gpufleet.base import settings
from gpufleet.base.settings import Settings, config_path  # noqa: F401 (re-exported)
from gpufleet.cli.output import fail
from gpufleet.client.http import ApiError, Client

ServerOpt = Annotated[
    str | None, typer.Option("--server", help="Controller URL (env GPUFLEET_SERVER).")
]
# the parameter keeps its name ``token`` in every command: it is the token's file, never the token
TokenOpt = Annotated[
    str | None,
    typer.Option(
        "--token-file",
        help="File holding the bearer token, mode 0600 "
        "(env GPUFLEET_TOKEN or GPUFLEET_TOKEN_FILE).",
        show_default=False,
    ),
]
cli_ca: str | None = None  # ``gpufleet --ca FILE``: set by the root command for this run


def resolve(
    server: str | None = None,
    token_file: str | None = None,
    env: Mapping[str, str] = os.environ,
    ca: str | None = None,
) -> Settings:
    """The settings a command runs with; exits 2 with what to do when no server is known."""
    try:
        return settings.resolve(server, token_file, env, ca or cli_ca)
    except settings.SettingsError as e:
        fail(e.message, e.hint, code=2)


def _default_factory(settings: Settings) -> Client:
    try:
        c = Client(settings.server, settings.token, ca=settings.ca)
    except ValueError as e:  # the CA file
        fail(str(e), "check --ca / GPUFLEET_CA", code=2)
    if os.environ.get("GPUFLEET_ALLOW_STALE", "") in ("1", "true"):
        c.allow_stale()  # a standby may answer jobs and nodes from the store (note below)
    return c


def _say_stale(c: Client) -> None:
    """Where a standby answered (GPUFLEET_ALLOW_STALE), a note on stderr says how stale."""
    st = c.staleness
    if st.role != "standby":
        return
    seen = (
        "it never saw a leader"
        if st.last_contact_ms is None
        else f"it last saw the leader {st.last_contact_ms / 1000:.1f} s before"
    )
    now = "" if st.known_leader else "; no leader is known now"
    print(f"note: a standby answered from the store: {seen}{now}", file=sys.stderr)


# Tests replace this to hand the CLI a Client over an httpx.MockTransport.
client_factory: Callable[[Settings], Client] = _default_factory

HINTS = {
    400: "fix the request as the message says",
    403: "your token's role may not do this: ask an admin (gpufleet token create)",
    404: "check the name or id (gpufleet jobs --all, gpufleet nodes, gpufleet queues)",
    409: "it changed meanwhile: look at it again and retry",
    422: "fix the field named above",
    429: "the server is busy: retry in a moment",
}


def hint_for(status: int, settings: Settings) -> str:
    if status == 401:
        if settings.token is None:
            return (
                "no token is set: pass --token-file FILE, set GPUFLEET_TOKEN, "
                f"or add 'token_file: …' to {settings.config_path}"
            )
        return "check your token (GPUFLEET_TOKEN): it may be mistyped or revoked"
    if status >= 500:
        return "the server failed: see the controller's log"
    return HINTS.get(status, "see the message above")


@contextmanager
def connect(
    server: str | None, token_file: str | None, hints: Mapping[int, str] | None = None
) -> Iterator[Client]:
    """A Client for one command; refusals and network failures become ``error:`` lines."""
    settings = resolve(server, token_file)
    client = client_factory(settings)
    try:
        yield client
        _say_stale(client)
    except ApiError as e:
        hint = (hints or {}).get(e.status) or hint_for(e.status, settings)
        fail(f"{str(e).removeprefix(f'{e.status}: ')} ({e.status})", hint)
    except httpx.ConnectError as e:
        if "CERTIFICATE_VERIFY_FAILED" in str(e):
            fail(
                f"the server at {settings.server} has a certificate this CA does not vouch for "
                f"({e})",
                "pass --ca FILE or set GPUFLEET_CA to the cluster's CA certificate",
            )
        fail(
            f"cannot reach the gpufleet server at {settings.server}: is it running? "
            "(gpufleet controller)"
        )
    except httpx.TimeoutException:
        fail(f"the gpufleet server at {settings.server} did not answer in time", "retry later")
    except httpx.HTTPError as e:
        fail(f"talking to {settings.server} failed: {e}", "check --server")
    except (pydantic.ValidationError, json.JSONDecodeError) as e:
        first = str(e).splitlines()[0]
        fail(
            f"unexpected answer from {settings.server}: {first}",
            "is this a gpufleet server of the same version?",
        )
    finally:
        client.close()
