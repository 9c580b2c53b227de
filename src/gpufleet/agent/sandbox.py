"""Where a task runs: its files on disk and the command line that switches to its account.

The agent's directories (``data_dir/JOB/ATTEMPT``) stay the agent's own, 0700: a task's
account owns only its log files (0600) and its private temporary directory (0700), so a job
can never plant a symlink where the agent, as root, writes next (pid files, the logs of the
next attempt). As root the task gets its own mount namespace with that directory bind-mounted
on /tmp; it then switches to its account with util-linux ``setpriv``, which arms the
parent-death signal after the switch (the kernel clears it on a change of uid).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from pathlib import Path

from gpufleet.agent.accounts import Account, LaunchRefused

_SETPRIV = shutil.which("setpriv")
_UNSHARE = shutil.which("unshare")
_MOUNT = shutil.which("mount")
_SH = "/bin/sh"
# $0 mount, $1 the task's directory; the rest is the command. A failed mount exits 125 (the
# agent could not start the task) with mount's own error in the task's stderr log.
_BIND_TMP = '"$0" --bind "$1" /tmp || exit 125; shift; exec "$@"'

# A process must not outlive what supervises it: the kernel kills it with its parent
# (PR_SET_PDEATHSIG, set by util-linux's setpriv, which then execs the command in place). A
# task's parent is its keeper (agent/keeper.py), which outlives the agent: a dead agent's
# tasks run on, the watchdog's to fence, the next agent's to adopt (ADR 0031).
PDEATHSIG: tuple[str, ...] = (_SETPRIV, "--pdeathsig", "KILL") if _SETPRIV else ()


def private_dir(path: Path, owner: Account | None = None) -> None:
    """``path`` as a directory only its owner can enter (the agent's unless ``owner``)."""
    path.mkdir(parents=True, exist_ok=True)
    st = path.lstat()
    if not stat.S_ISDIR(st.st_mode):
        raise NotADirectoryError(f"{path} is not a directory")
    if owner is not None and (st.st_uid, st.st_gid) != (owner.uid, owner.gid):
        os.chown(path, owner.uid, owner.gid, follow_symlinks=False)
    os.chmod(path, 0o700)


def open_log(path: Path, owner: Account | None) -> int:
    """An append-only log file descriptor: 0600, owned by the task's account (``None``: by
    whoever owns it already, else the agent); never through a symlink."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        st = os.fstat(fd)
        if owner is not None and (st.st_uid, st.st_gid) != (owner.uid, owner.gid):
            os.fchown(fd, owner.uid, owner.gid)
        os.fchmod(fd, 0o600)
    except BaseException:
        os.close(fd)
        raise
    return fd


def fresh_tmp(path: Path, owner: Account) -> None:
    """The task's own temporary directory, empty (a relaunch after a restart starts clean)."""
    remove_tree(path)
    path.mkdir(mode=0o700)
    os.chown(path, owner.uid, owner.gid, follow_symlinks=False)
    os.chmod(path, 0o700)


def remove_tree(path: Path) -> None:
    """Remove what a task left (its own files: rmtree never follows its symlinks); best
    effort, so that cleaning up never turns into a failure of its own."""
    with contextlib.suppress(OSError):
        if path.is_symlink() or not path.is_dir():
            path.unlink()
            return
        shutil.rmtree(path, ignore_errors=True)


def switches(account: Account) -> bool:
    """Whether running as ``account`` means leaving the agent's own uid."""
    return account.uid != os.geteuid()


def _under_tmp(program: str) -> str:
    """Where ``program`` really is, if that is under /tmp (hidden by the private /tmp); else "".
    A bare name is looked up on the task's PATH, which never includes /tmp."""
    if not os.path.isabs(program):
        return ""
    real = os.path.realpath(program)
    for p in (os.path.normpath(program), real):
        if p == "/tmp" or p.startswith("/tmp/"):
            return real
    return ""


def wrap(command: list[str], account: Account, tmp: Path) -> tuple[list[str], str]:
    """The command line that runs ``command`` as ``account``, and the task's TMPDIR."""
    if not switches(account):
        return [*PDEATHSIG, *command], str(tmp)
    if not (_SETPRIV and _UNSHARE and _MOUNT):
        raise LaunchRefused(
            "refused: the agent runs as root but util-linux (setpriv, unshare, mount) is not "
            "installed, so it cannot run the task as its owner; install util-linux on the node"
        )
    hidden = _under_tmp(command[0]) if command else ""
    if hidden:
        raise LaunchRefused(
            f"refused: the command {command[0]} is under /tmp ({hidden}), but a task run as its "
            "owner has a private /tmp of its own, where it does not exist; put the program "
            "somewhere the task can see (a home or shared directory)"
        )
    as_owner = [
        _SETPRIV,
        f"--reuid={account.uid}",
        f"--regid={account.gid}",
        "--init-groups",
        "--pdeathsig=KILL",  # armed after the switch: the kernel clears it on a uid change
        "--",
    ]
    argv = [
        *PDEATHSIG,  # covers the moments before the switch
        _UNSHARE,
        "--mount",
        "--propagation",
        "private",  # the bind mount stays in the task's namespace
        "--",
        _SH,
        "-c",
        _BIND_TMP,
        _MOUNT,
        str(tmp),
        *as_owner,
        *command,
    ]
    return argv, "/tmp"
