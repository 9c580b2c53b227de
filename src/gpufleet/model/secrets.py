"""The secrets a job names (JobSpec ``secrets``): which secret, where it looks for it, and how
its task receives it (an environment variable, or a file in ``$GPUFLEET_SECRETS_DIR``).

Only references: a value never enters a spec. The controller checks at submit that each one
exists and may be used by the job, and opens it only when a launch goes to its agent."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from gpufleet.model.validate import Fields

SCOPES = ("user", "queue", "cluster")
MAX_SECRET_NAME = 128  # as the store's names
MAX_SECRETS = 64  # per job
MAX_SECRET_VALUE = 64 * 1024  # characters (as an environment value may hold)
MAX_ENV_NAME = 256
# a name is also the default file name and, upper-cased, the default variable
NAME_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$"
ENV_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
FILE_PATTERN = NAME_PATTERN  # one plain file name: no '/', never '.' or '..'
_NAME = re.compile(NAME_PATTERN)
_ENV = re.compile(ENV_PATTERN)
SECRETS_DIR_ENV = "GPUFLEET_SECRETS_DIR"


@dataclass(frozen=True, slots=True)
class SecretRef:
    name: str
    scope: str = ""  # "": the job's user's, else its queue's, else the cluster's
    env: str = ""  # deliver as this environment variable …
    file: str = ""  # … or as this file in $GPUFLEET_SECRETS_DIR (exactly one of the two)


def name_problem(name: str) -> str | None:
    if not 1 <= len(name) <= MAX_SECRET_NAME:
        return f"a secret name has 1 to {MAX_SECRET_NAME} characters, got {len(name)}"
    if not _NAME.match(name):
        return (
            f"{name[:60]!r} is not a secret name (letters, digits, '_', '.', '-'; not starting "
            "with '.' or '-')"
        )
    return None


def default_env(name: str) -> str:
    """The variable a secret goes into when none is named: API_KEY for api-key."""
    v = re.sub(r"[^A-Za-z0-9_]", "_", name).upper()
    return v if not v[:1].isdigit() else f"_{v}"


def read_secrets(f: Fields, env_keys: set[str]) -> tuple[SecretRef, ...]:
    raw = f.items("secrets")
    if len(raw) > MAX_SECRETS:
        raise f.error("secrets", f"must name at most {MAX_SECRETS} secrets, got {len(raw)}")
    out: list[SecretRef] = []
    envs: set[str] = set()
    files: set[str] = set()
    for i, item in enumerate(raw):
        out.append(_read_one(Fields(item, source=f.source, path=f.field(f"secrets[{i}]"))))
        ref, where = out[-1], f"secrets[{i}]"
        if ref.env:
            if ref.env in envs or ref.env in env_keys:
                raise f.error(f"{where}.env", f"{ref.env} is set twice (by env or a secret)")
            envs.add(ref.env)
        elif ref.file in files:
            raise f.error(f"{where}.file", f"two secrets go to the file {ref.file}")
        files.add(ref.file)
    return tuple(out)


def _read_one(s: Fields) -> SecretRef:
    name = s.text("name", required=True, max_len=MAX_SECRET_NAME)
    if problem := name_problem(name):
        raise s.error("name", problem)
    scope = s.text("scope", "", max_len=16)
    if scope and scope not in SCOPES:
        raise s.error("scope", f"must be one of {', '.join(SCOPES)}, got {scope!r}")
    env = s.text("env", "", max_len=MAX_ENV_NAME)
    file = s.text("file", "", max_len=MAX_SECRET_NAME)
    s.finish()
    if env and file:
        raise s.error("file", "give env or file, not both")
    if not env and not file:
        raise s.error("env", "give env (a variable) or file (a file name) for the secret")
    if env and not _ENV.match(env):
        raise s.error("env", f"{env[:60]!r} is not a variable name (letters, digits, '_')")
    if env.startswith("GPUFLEET_"):
        raise s.error("env", f"{env}: GPUFLEET_ variables are the controller's own")
    if file and not _NAME.match(file):
        raise s.error(
            "file", f"{file[:60]!r} is not a plain file name (letters, digits, '_', '.', '-')"
        )
    return SecretRef(name, scope, env, file)


def ref_to_dict(r: SecretRef) -> dict[str, Any]:
    return {"name": r.name, "scope": r.scope, "env": r.env, "file": r.file}


def ref_from_dict(d: Any) -> SecretRef:
    return SecretRef(
        str(d["name"]), str(d.get("scope", "")), str(d.get("env", "")), str(d.get("file", ""))
    )
