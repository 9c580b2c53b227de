"""Where a command finds its server, token and CA, without typer, httpx or pydantic: the
``gpufleet`` CLI (``cli/config.py``), the Slurm shims (``shims/``) and the lean client
(``client/lean.py``) all read them here, so they agree (issue 12); in ``base`` because the client
sits below the CLI (issue 27). The precedence is written in ``cli/config.py``."""

from __future__ import annotations

import os

from gpufleet.base.secretfile import SecretFileError, read_secret

# Neither typing nor pathlib at run time: a shim's whole start is a few milliseconds of imports,
# and these two were a fifth of them (issue 27). mypy reads the TYPE_CHECKING branches.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any, NamedTuple

KEYS = ("server", "token", "token_file", "ca")


class SettingsError(Exception):
    """What is wrong with the settings and what to do; a command exits 2 with both."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


if TYPE_CHECKING:

    class Settings(NamedTuple):  # not a dataclass: dataclasses imports inspect, 10 ms (issue 12)
        server: str
        token: str | None
        config_path: str | os.PathLike[str]
        ca: str | None = None

else:  # the same fields without typing's NamedTuple, nor collections' namedtuple (issue 27)

    class Settings:
        __slots__ = ("ca", "config_path", "server", "token")

        def __init__(
            self, server: str, token: str | None, config_path: str, ca: str | None = None
        ) -> None:
            self.server, self.token, self.config_path, self.ca = server, token, config_path, ca

        def __repr__(self) -> str:  # the token stays out of logs
            return f"Settings(server={self.server!r}, config_path={self.config_path!r})"

        def __eq__(self, other: object) -> bool:
            fields = ("server", "token", "config_path", "ca")
            return isinstance(other, Settings) and all(
                getattr(self, f) == getattr(other, f) for f in fields
            )


def config_path(env: Mapping[str, str] = os.environ) -> str:
    if env.get("GPUFLEET_CONFIG"):
        return os.path.expanduser(env["GPUFLEET_CONFIG"])
    home = env.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(home, "gpufleet", "config.yaml")


def read_file(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return {}
    except OSError as e:
        raise SettingsError(
            f"cannot read the config file {path}: {e}", "fix or remove it"
        ) from None
    import yaml  # only when there is a file: a setup by environment never loads it (issue 12)

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise SettingsError(
            f"cannot read the config file {path}: {e}", "fix or remove it"
        ) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SettingsError(f"{path}: expected a mapping with server: and token:", "fix the file")
    unknown = sorted(set(data) - set(KEYS))
    if unknown:
        raise SettingsError(
            f"{path}: unknown key {unknown[0]!r}", f"allowed keys: {', '.join(KEYS)}"
        )
    if data.get("token") is not None:
        mode = os.stat(path).st_mode & 0o777
        if mode & 0o077:
            raise SettingsError(
                f"{path} holds a token but its permissions {mode:04o} are too open",
                f"run: chmod 600 {path}",
            )
    return {k: str(v) for k, v in data.items() if v is not None}


def _token_from_file(path: str, origin: str) -> str:
    try:
        return read_secret(path)
    except SecretFileError as e:
        raise SettingsError(f"{origin}: {e}", "fix the file or point at another one") from None


def token(token_file: str | None, env: Mapping[str, str], file: dict[str, str]) -> str | None:
    if token_file:
        return _token_from_file(token_file, "--token-file")
    if env.get("GPUFLEET_TOKEN"):
        return env["GPUFLEET_TOKEN"].strip()
    if env.get("GPUFLEET_TOKEN_FILE"):
        return _token_from_file(env["GPUFLEET_TOKEN_FILE"], "GPUFLEET_TOKEN_FILE")
    if file.get("token_file"):
        return _token_from_file(file["token_file"], "the config file's token_file")
    return file.get("token")


SITE_CONFIG = "/etc/gpufleet/client.yaml"  # every user's: written by `gpufleet setup`
SITE_KEYS = ("server", "ca")


def site_file(env: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The host's ``server:`` and ``ca:`` (``$GPUFLEET_SITE_CONFIG`` or ``SITE_CONFIG``), which
    a user's own settings override; a token there, every user's, is refused."""
    path = env.get("GPUFLEET_SITE_CONFIG") or SITE_CONFIG
    if not os.path.exists(path):  # one stat for a host without it
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise SettingsError(
            f"cannot read the config file {path}: {e}", "fix or remove it"
        ) from None
    import yaml

    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as e:
        raise SettingsError(
            f"cannot read the config file {path}: {e}", "fix or remove it"
        ) from None
    if not isinstance(data, dict) or set(data) - set(SITE_KEYS):
        raise SettingsError(
            f"{path}: expected only {' and '.join(k + ':' for k in SITE_KEYS)}",
            "a token is each user's own: in ~/.config/gpufleet/config.yaml or GPUFLEET_TOKEN_FILE",
        )
    return {k: str(v) for k, v in data.items() if v is not None}


def resolve(
    server: str | None = None,
    token_file: str | None = None,
    env: Mapping[str, str] = os.environ,
    ca: str | None = None,
) -> Settings:
    """The settings a command runs with; SettingsError says what to do when no server is known."""
    path = config_path(env)
    file = read_file(path)
    if not (file.get("server") and file.get("ca")):  # the host's, under the user's own
        file = {**site_file(env), **file}
    url = server or env.get("GPUFLEET_SERVER") or file.get("server")
    if not url:
        raise SettingsError(
            "no gpufleet server is configured",
            f"pass --server URL, set GPUFLEET_SERVER, or write 'server: URL' in {path} "
            f"(or, for every user of this host, in {SITE_CONFIG}: gpufleet setup path "
            "--controller URL)",
        )
    # several controllers (high availability): URL,URL; each may leave out http://
    url = ",".join(u if "://" in u else f"http://{u}" for u in url.replace(" ", "").split(","))
    ca = ca or env.get("GPUFLEET_CA") or file.get("ca")
    return Settings(url, token(token_file, env, file), path, ca)
