"""Which nodes may run a user's jobs: the Unix accounts the nodes' agents found through NSS.

A root agent runs each task as its owner's Unix account (ADR 0019), so a job may run only on
a node where that account exists. Such a node (one that "checks") answers the controller's
questions about users (``pwd.getpwnam`` there: files, LDAP, SSSD alike) and the answers land
here; nodes that do not check (an agent that is not root runs every task as itself; the
simulator's nodes) never keep a job off. A checking node that has not answered about a user
yet keeps that user's jobs off too: a launch there could only fail (ADR 0037).

The cycle turns a user's barred nodes into exclusions, as ``-x`` (``reservations.Windows``);
a job barred from every node waits with a Reason that names the user and the nodes. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gpufleet.model.hostlist import ranged
from gpufleet.model.reason import Reason, ReasonCode

# what a node answered about a user: the uid of the account, or None for no account
Answer = int | None


class Accounts:
    """The checking nodes' answers, by node then user; the barred nodes per user, worked out
    once per change (a cycle asks for each pending job)."""

    def __init__(self) -> None:
        self.nodes: dict[str, dict[str, Answer]] = {}
        self._barred: dict[str, tuple[str, ...]] = {}

    def __bool__(self) -> bool:
        return bool(self.nodes)

    def record(self, node: str, answers: Iterable[tuple[str, Answer]], checks: bool = True) -> None:
        """``node``'s answers (it checks accounts from now on), or, ``checks`` False, the node
        runs every task as its agent's own user: it keeps no one off."""
        self._barred.clear()
        if not checks:
            self.nodes.pop(node, None)
            return
        self.nodes.setdefault(node, {}).update(answers)

    def forget(self, users: Iterable[str]) -> None:
        """Drop every node's answers about ``users`` (the controller asks about them no more:
        its memory is bounded by its recent users, not by the site's)."""
        self._barred.clear()
        gone = set(users)
        for known in self.nodes.values():
            for u in gone & known.keys():
                del known[u]

    def barred(self, user: str) -> tuple[str, ...]:
        """The checking nodes where ``user`` has no account, or has not been looked up yet."""
        got = self._barred.get(user)
        if got is None:
            got = self._barred[user] = tuple(
                n for n, known in self.nodes.items() if known.get(user) is None
            )
        return got

    def missing(self, user: str, among: Iterable[str]) -> list[str]:
        """The nodes of ``among`` that answered that ``user`` has no account."""
        return [n for n in among if (k := self.nodes.get(n)) is not None and user in k
                and k[user] is None]  # fmt: skip

    def uids(self, user: str) -> dict[int, list[str]]:
        """The uids ``user`` has on the nodes that know it, with the nodes of each."""
        out: dict[int, list[str]] = {}
        for n, known in self.nodes.items():
            uid = known.get(user)
            if uid is not None:
                out.setdefault(uid, []).append(n)
        return out

    def held(self, user: str, names: Iterable[str]) -> Reason | None:
        """Why a job of ``user`` cannot run on any of the nodes ``names`` (the snapshot's):
        None when one of them may run it."""
        barred = set(self.barred(user))
        names = list(names)
        if not names or not barred.issuperset(names):
            return None
        missing = self.missing(user, names)
        if missing:
            return no_account(user, missing, [n for n in names if n not in set(missing)])
        return Reason(
            ReasonCode.ACCOUNT_LOOKUP,
            f"waiting for {ranged(names)} to look up user {user}'s Unix account",
            {"user": user, "nodes": ranged(names)},
        )


def no_account(user: str, missing: list[str], unknown: list[str]) -> Reason:
    """The Reason of a job whose user has no account on ``missing`` (and is not yet known on
    ``unknown``): held until an administrator makes it, as Slurm holds a job whose launch
    failed for its user ("User not found on host")."""
    tail = f"; not yet looked up on {ranged(unknown)}" if unknown else ""
    return Reason(
        ReasonCode.NO_ACCOUNT,
        f"user {user} has no Unix account on {ranged(missing)}{tail}: held until it has one "
        f"there with the same UID on every node (useradd {user}, or the site's LDAP/SSSD)",
        {"user": user, "nodes": ranged(missing)},
    )


def uid_mismatch(user: str, uids: Mapping[int, list[str]]) -> str:
    """Words for a user whose uid differs between nodes ("" when it does not)."""
    if len(uids) < 2:
        return ""
    each = "; ".join(f"uid {u} on {ranged(ns)}" for u, ns in sorted(uids.items()))
    return (
        f"user {user} has different UIDs on different nodes ({each}): the files a job writes "
        "on shared storage belong to a different UID on each; give the account one UID "
        "everywhere (as Slurm requires)"
    )


__all__ = ["Accounts", "Answer", "no_account", "uid_mismatch"]
