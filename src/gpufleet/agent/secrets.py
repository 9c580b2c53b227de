"""A task's secrets, as its launch brought them: environment variables, and files in a
directory of its own (``$GPUFLEET_SECRETS_DIR``).

The directory sits inside the task's private temporary directory (the one a task run as its
owner sees as /tmp), so it goes wherever that goes: removed when the task is reaped, when its
launch fails, and by the orphan cleanup after an agent restart. It is 0700 and its files 0400,
all owned by the task's account; each file is created with O_EXCL|O_NOFOLLOW in a directory
made fresh for this launch, so nothing planted can redirect a write. No value is ever logged:
the messages here name a secret's variable or file, never what it holds."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

from gpufleet.agent.accounts import Account, LaunchRefused
from gpufleet.api.schemas import TaskSecret
from gpufleet.model.secrets import ENV_PATTERN, FILE_PATTERN, SECRETS_DIR_ENV

SUBDIR = ".gpufleet-secrets"
_ENV = re.compile(ENV_PATTERN)
_FILE = re.compile(FILE_PATTERN)


def deliver(
    secrets: Sequence[TaskSecret], tmp: Path, task_tmp: str, owner: Account
) -> dict[str, str]:
    """Write the file secrets under ``tmp`` (the task's temporary directory, which the task
    sees as ``task_tmp``); the variables the task gets (the env secrets, and
    GPUFLEET_SECRETS_DIR when there are files)."""
    env: dict[str, str] = {}
    files = []
    for t in secrets:
        if t.env:
            if not _ENV.match(t.env) or t.env.startswith("GPUFLEET_"):
                raise LaunchRefused(f"refused: secret {t.name!r}: bad variable name {t.env!r}")
            env[t.env] = t.value
        elif _FILE.match(t.file):
            files.append(t)
        else:
            raise LaunchRefused(f"refused: secret {t.name!r}: bad file name {t.file!r}")
    if not files:
        return env
    d = tmp / SUBDIR
    d.mkdir(mode=0o700)
    for t in files:
        _write(d / t.file, t.value.encode(), owner)
    os.chown(d, owner.uid, owner.gid, follow_symlinks=False)
    os.chmod(d, 0o700, follow_symlinks=False)
    env[SECRETS_DIR_ENV] = f"{task_tmp.rstrip('/')}/{SUBDIR}"
    return env


def _write(path: Path, data: bytes, owner: Account) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(path, flags, 0o400)
    try:
        os.fchmod(fd, 0o400)
        st = os.fstat(fd)
        if (st.st_uid, st.st_gid) != (owner.uid, owner.gid):
            os.fchown(fd, owner.uid, owner.gid)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def leftovers(data_dir: Path) -> list[Path]:
    """Secrets directories under the agent's data directory (``JOB/ATTEMPT/rankN.tmpdir``)."""
    return sorted(data_dir.glob(f"*/*/rank*.tmpdir/{SUBDIR}"))
