"""Which Unix account a task runs as.

As Slurm does, an agent running as root runs each task as its owner's account: the gpufleet
user names a Unix account on the node (``run_as``), resolved here with ``pwd``. An owner with
no account on the node is refused, unless the controller names a fallback account. An agent
that is not root cannot switch accounts: its tasks run as its own user (it says so once).
"""

from __future__ import annotations

import os
import pwd
from collections.abc import Iterable
from dataclasses import dataclass


class LaunchRefused(Exception):
    """The task cannot start; the message is its Reason (the job's ``show`` displays it)."""


@dataclass(frozen=True, slots=True)
class Account:
    name: str
    uid: int
    gid: int
    home: str
    shell: str

    @staticmethod
    def of(entry: pwd.struct_passwd) -> Account:
        return Account(
            entry.pw_name, entry.pw_uid, entry.pw_gid, entry.pw_dir, entry.pw_shell or "/bin/sh"
        )


def own_account() -> Account:
    """The account this process runs as."""
    uid = os.geteuid()
    try:
        return Account.of(pwd.getpwuid(uid))
    except KeyError:  # a uid without a passwd entry (containers): still a real account
        return Account(str(uid), uid, os.getegid(), os.environ.get("HOME", "/"), "/bin/sh")


def _lookup(name: str) -> Account | None:
    if not name or "\0" in name:
        return None
    try:
        return Account.of(pwd.getpwnam(name))
    except KeyError:
        return None


def look_up(users: Iterable[str]) -> dict[str, int | None]:
    """Each user's uid on this node, or None: one NSS lookup each (files, LDAP, SSSD alike),
    never an enumeration of every account, which a site with 100,000 in LDAP could not bear
    (ADR 0037). Root's uid is told as it is: the controller never runs a job as root."""
    out: dict[str, int | None] = {}
    for name in users:
        found = _lookup(name)
        out[name] = None if found is None else found.uid
    return out


def resolve(run_as: str, fallback: str, *, as_root: bool, agent: Account) -> Account:
    """The account for a task of ``run_as``; raises ``LaunchRefused`` with the reason.

    An empty ``run_as`` (a controller that names no owner) and an agent that is not root run
    the task as the agent's own account."""
    if not as_root or not run_as:
        return agent
    found = _lookup(run_as)
    if found is None and fallback:
        found = _lookup(fallback)
        if found is None:
            raise LaunchRefused(
                f"refused: user {run_as!r} has no Unix account on this node, and the fallback "
                f"account {fallback!r} does not exist here either; create one of them on the "
                "node (useradd) or name an existing account with the controller's "
                "--fallback-account"
            )
        return found
    if found is None:
        raise LaunchRefused(
            f"refused: user {run_as!r} has no Unix account on this node; create it (useradd "
            f"{run_as}) or start the controller with --fallback-account ACCOUNT"
        )
    if found.uid == 0:  # only a fallback an admin named explicitly may be root
        raise LaunchRefused(
            f"refused: user {run_as!r} maps to uid 0; jobs never run as root through their "
            "owner's name"
        )
    return found
