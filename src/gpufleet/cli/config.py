"""Where the CLI finds its server, token and CA, and the one place that builds its Client.

Precedence: ``--server``/``--token-file``/``--ca`` flags, then ``GPUFLEET_SERVER``,
``GPUFLEET_TOKEN`` (or ``GPUFLEET_TOKEN_FILE``) and ``GPUFLEET_CA``, then the config file
(``$GPUFLEET_CONFIG`` or ``~/.config/gpufleet/config.yaml``) with ``server:``, ``token:`` or
``token_file:``, and ``ca:``. A token is never taken from the command line (every local user can
read it in ``ps``), and a token file, or a config file holding a token, must be private (0600).
Every command talks to the server through ``connect``, which turns refusals and unreachable
servers into one line that says what to do.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import httpx
import pydantic
import typer

from gpufleet.cli.output import fail
from gpufleet.client.http import ApiError, Client
from gpufleet.secretfile import SecretFileError, read_secret

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
_KEYS = ("server", "token", "token_file", "ca")
cli_ca: str | None = None  # ``gpufleet --ca FILE``: set by the root command for this run


@dataclass(frozen=True, slots=True)
class Settings:
    server: str
    token: str | None
    config_path: Path
    ca: str | None = None


def config_path(env: Mapping[str, str] = os.environ) -> Path:
    if env.get("GPUFLEET_CONFIG"):
        return Path(env["GPUFLEET_CONFIG"]).expanduser()
    base = Path(env["XDG_CONFIG_HOME"]) if env.get("XDG_CONFIG_HOME") else Path.home() / ".config"
    return base / "gpufleet" / "config.yaml"


def _read_file(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as e:
        fail(f"cannot read the config file {path}: {e}", "fix or remove it", code=2)
    import yaml  # only when there is a file: a setup by environment never loads it (issue 12)

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        fail(f"cannot read the config file {path}: {e}", "fix or remove it", code=2)
    if data is None:
        return {}
    if not isinstance(data, dict):
        fail(f"{path}: expected a mapping with server: and token:", "fix the file", code=2)
    unknown = sorted(set(data) - set(_KEYS))
    if unknown:
        fail(f"{path}: unknown key {unknown[0]!r}", f"allowed keys: {', '.join(_KEYS)}", code=2)
    if data.get("token") is not None:
        mode = path.stat().st_mode & 0o777
        if mode & 0o077:
            fail(
                f"{path} holds a token but its permissions {mode:04o} are too open",
                f"run: chmod 600 {path}",
                code=2,
            )
    return {k: str(v) for k, v in data.items() if v is not None}


def _token_from_file(path: str, origin: str) -> str:
    try:
        return read_secret(path)
    except SecretFileError as e:
        fail(f"{origin}: {e}", "fix the file or point at another one", code=2)


def _token(token_file: str | None, env: Mapping[str, str], file: dict[str, str]) -> str | None:
    if token_file:
        return _token_from_file(token_file, "--token-file")
    if env.get("GPUFLEET_TOKEN"):
        return env["GPUFLEET_TOKEN"].strip()
    if env.get("GPUFLEET_TOKEN_FILE"):
        return _token_from_file(env["GPUFLEET_TOKEN_FILE"], "GPUFLEET_TOKEN_FILE")
    if file.get("token_file"):
        return _token_from_file(file["token_file"], "the config file's token_file")
    return file.get("token")


def resolve(
    server: str | None = None,
    token_file: str | None = None,
    env: Mapping[str, str] = os.environ,
    ca: str | None = None,
) -> Settings:
    """The settings a command runs with; exits 2 with what to do when no server is known."""
    path = config_path(env)
    file = _read_file(path)
    url = server or env.get("GPUFLEET_SERVER") or file.get("server")
    if not url:
        fail(
            "no gpufleet server is configured",
            f"pass --server URL, set GPUFLEET_SERVER, or write 'server: URL' in {path}",
            code=2,
        )
    if "://" not in url:
        url = f"http://{url}"
    ca = ca or cli_ca or env.get("GPUFLEET_CA") or file.get("ca")
    return Settings(url, _token(token_file, env, file), path, ca)


def _default_factory(settings: Settings) -> Client:
    try:
        return Client(settings.server, settings.token, ca=settings.ca)
    except ValueError as e:  # the CA file
        fail(str(e), "check --ca / GPUFLEET_CA", code=2)


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
