"""Secrets on disk: read a token or password file only when it is private, write one with no
moment in which another user could read it, and make a process create only private files.

Standard library only: the agent, the CLI and the controller all read secrets this way, and none
of them may import another's internals (docs/ARCHITECTURE.md)."""

from __future__ import annotations

import os
import stat

TYPE_CHECKING = False  # typing and pathlib at run time only where a path is written (issue 27)
if TYPE_CHECKING:
    from pathlib import Path

PRIVATE_UMASK = 0o077


class SecretFileError(ValueError):
    """A secret file that is missing, empty, not a file, or readable by others."""


def private_umask() -> None:
    """Files and directories this process creates from now on are its owner's alone.

    The controller and the agent call it first: the SQLite file, job logs and their
    directories are then private without each call site remembering a mode."""
    os.umask(PRIVATE_UMASK)


def private_dir(path: Path) -> Path:
    """``path`` as a directory only its owner may enter (created, or tightened, to 0700)."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    if stat.S_IMODE(path.stat().st_mode) & 0o077:
        path.chmod(0o700)
    return path


def read_secret(path: str | Path, what: str = "token") -> str:
    """The secret in ``path``, stripped. Refuses, as ssh does with a key, a file that its group
    or others may read or write: the secret may already have leaked, and it must be fixed."""
    p = os.path.expanduser(path)  # os.path: every command reads its token here (issue 27)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise SecretFileError(f"{what} file {p}: no such file") from None
    except OSError as e:
        raise SecretFileError(f"{what} file {p}: {e.strerror or e}") from None
    if not stat.S_ISREG(st.st_mode):
        raise SecretFileError(f"{what} file {p}: not a regular file")
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o077:
        raise SecretFileError(
            f"{what} file {p}: permissions {mode:04o} are too open (group or others may read "
            f"it); run: chmod 600 {p}"
        )
    try:
        with open(p, encoding="utf-8") as f:
            text = f.read().strip()
    except (OSError, UnicodeDecodeError) as e:
        raise SecretFileError(f"{what} file {p}: cannot read it: {e}") from None
    if not text:
        raise SecretFileError(f"{what} file {p}: it is empty")
    if "\n" in text or "\0" in text:
        raise SecretFileError(f"{what} file {p}: expected one line")
    return text


def write_secret(path: str | Path, text: str, *, replace: bool = False) -> Path:
    """Write ``text`` to a file that is 0600 from its creation on.

    ``replace=False`` refuses an existing file (O_EXCL: nobody can have pre-created it with
    other modes or as a symlink). ``replace=True`` writes a fresh 0600 file beside it and renames
    it over the old one, so readers see the old secret or the new one, never a partial file."""
    from pathlib import Path

    p = Path(path).expanduser()
    if replace:  # a fresh name nobody can have planted (mkstemp: O_EXCL, 0600)
        import tempfile  # here: reading a token (every command) never needs it (issue 12)

        fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{p.name}.", suffix=".tmp")
        target = Path(tmp)
    else:
        target = p
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
        try:
            fd = os.open(target, flags, 0o600)
        except FileExistsError:
            raise SecretFileError(f"{p}: exists; remove it or choose another file") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            os.fchmod(f.fileno(), 0o600)  # a umask only takes bits away: make it exactly 0600
            f.write(text if text.endswith("\n") else text + "\n")
            f.flush()
            os.fsync(f.fileno())
        if replace:
            os.replace(target, p)
    except BaseException:
        if replace:
            target.unlink(missing_ok=True)
        raise
    return p
