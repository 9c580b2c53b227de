"""Identity that matches the site (ADR 0037): which Unix accounts the nodes have, asked of them.

A root agent runs each task as its owner's account, so the controller asks the nodes about
the users it meets, never for a list of every account (a site's LDAP may hold 100,000):

- a node that runs tasks as their owners says so at registration; it is then asked about the
  recent users (at most ``MAX_ACCOUNTS``, the least recent forgotten first, never one with an
  unfinished job), one NSS lookup each on the node;
- a user's first submission asks every such node about that user and waits a moment for the
  answers, so that a user no node has is refused at once, naming the nodes;
- the answers reach the core as ``NodeAccounts``: a job runs only where its user has an
  account, and waits with a Reason that says so where none has (``scheduler/identity.py``);
- a user whose UID differs between nodes is reported (the controller's log and
  ``GET /accounts/{user}``).

A controller started with ``--fallback-account`` asks nothing: every node runs such jobs as
that account."""

from __future__ import annotations

import asyncio
import logging

from gpufleet.api.schemas import MAX_ACCOUNTS, AgentCommand
from gpufleet.core.events import NodeAccounts
from gpufleet.model.hostlist import ranged
from gpufleet.model.job import JobSpec
from gpufleet.scheduler.identity import uid_mismatch
from gpufleet.server.admission import Problem
from gpufleet.server.service.identity_book import AccountBook
from gpufleet.server.service.requests import Requests

log = logging.getLogger("gpufleet.controller")

# a node is asked again this many heartbeats apart about the users of unfinished jobs it
# has no account for: a job held for its user starts once an administrator made the account
RECHECK_HEARTBEATS = 10


class Identity(Requests):
    identity: AccountBook

    def accounts_at_register(self, node: str, runs_as_owner: bool) -> None:
        """A node registers: whether it keeps jobs off for their users, and, if it does, the
        question about every recent user (asked again at each registration: accounts change,
        and a rebuilt core has forgotten the answers)."""
        book = self.identity
        checks = runs_as_owner and book.enabled
        (book.checking.add if checks else book.checking.discard)(node)
        self.post(NodeAccounts(node, (), checks))
        if checks:
            for user in sorted(self._busy_users() - book.recent.keys()):
                book.recent[user] = None  # after a restart: the users of unfinished jobs
            if book.recent:
                self._ask(node, list(book.recent))

    async def accounts_answered(self, node: str, answers: dict[str, int | None]) -> None:
        """A node's answers: into the core (returns once it holds them), then to those who
        wait for them; a UID that differs between nodes is reported once."""
        if node not in self.identity.checking:
            return  # a node that does not check (or no longer): nothing to keep off
        await self.event(NodeAccounts(node, tuple(answers.items())))
        accounts = self.ctrl.state.accounts
        for user in answers:
            waiting = self.identity.waiting.get(user)
            if waiting is not None:
                waiting[0].discard(node)
                if not waiting[0]:
                    waiting[1].set()
            self._report_mismatch(user, uid_mismatch(user, accounts.uids(user)))

    def uid_report(self, user: str) -> str:
        """The UID mismatch reported of ``user`` ("" none)."""
        return self.identity.told.get(user, "")

    def accounts_recheck(self, node: str, now: float) -> None:
        """At a heartbeat of a checking node: every ``RECHECK_HEARTBEATS`` heartbeats, ask it
        again about the users of unfinished jobs it has no account for (or did not say)."""
        book = self.identity
        if node not in book.checking:
            return
        if now - book.asked_at.setdefault(node, now) < RECHECK_HEARTBEATS * self.heartbeat_s:
            return
        book.asked_at[node] = now
        known = self.ctrl.state.accounts.nodes.get(node, {})
        users = sorted(u for u in self._busy_users() if known.get(u) is None)
        if users:
            self._ask(node, users)

    def _report_mismatch(self, user: str, words: str) -> None:
        told = self.identity.told
        if words and told.get(user) != words:
            log.warning("%s", words)
            told[user] = words
        elif not words:
            told.pop(user, None)

    async def owner_problems(self, spec: JobSpec) -> list[Problem]:
        """At submit: the user's accounts, looked up on the checking nodes first if the user is
        new (waiting at most ``first_wait_s`` for their answers); a problem when no node that
        could run the job has the account, and every one of them said so."""
        book = self.identity
        if not book.enabled or not book.checking:
            return []
        await self.look_up(spec.user)
        return self.account_problems(spec)

    async def user_accounts(self, user: str) -> tuple[dict[str, int | None], list[str], str]:
        """What the checking nodes say of ``user`` (asked first if the user is new): its uid
        on each that answered (None: no account), those that did not, the UID mismatch."""
        if self.identity.enabled and self.identity.checking:
            await self.look_up(user)
        known = self.ctrl.state.accounts.nodes
        answered = {n: k[user] for n, k in sorted(known.items()) if user in k}
        silent = sorted(n for n in self.identity.checking if n not in answered)
        return answered, silent, uid_mismatch(user, self.ctrl.state.accounts.uids(user))

    async def look_up(self, user: str) -> None:
        """``user`` among the recent ones; a new one is asked of every registered checking
        node, waiting at most ``first_wait_s`` for their answers."""
        book = self.identity
        if user in book.recent:
            book.recent.move_to_end(user)
        else:
            self._remember(user)
            asked = [n for n in book.checking if (link := self.links.get(n)) and link.registered]
            done = asyncio.Event()
            book.waiting[user] = (set(asked), done)
            for n in asked:
                self._ask(n, [user])
            try:
                if asked and book.first_wait_s > 0:
                    await asyncio.wait_for(done.wait(), book.first_wait_s)
            except TimeoutError:
                pass  # accepted: the job waits with its Reason until the nodes answer
            finally:
                book.waiting.pop(user, None)

    def account_problems(self, spec: JobSpec, at: str = "body.spec.user") -> list[Problem]:
        """The job's user has no account on any node that could run it, and each of them said
        so (sbatch refuses a user the cluster does not know: "Invalid user id")."""
        if not self.identity.enabled:
            return []
        accounts = self.ctrl.state.accounts
        if not accounts:
            return []
        names = [n.name for n in self._configured_nodes()[0]]
        if spec.nodelist:
            names = [n for n in names if n in set(spec.nodelist)]
        names = [n for n in names if n not in set(spec.exclude)]
        missing = accounts.missing(spec.user, names)
        if not names or len(missing) < len(names):
            return []
        return [
            (
                at,
                f"Invalid user id: user {spec.user!r} has no Unix account on any node that "
                f"could run this job ({ranged(missing)}); an administrator creates it on every "
                f"node with the same UID (useradd {spec.user}, or the site's LDAP/SSSD)",
            )
        ]

    def _remember(self, user: str) -> None:
        """``user`` among the recent ones; the least recent without unfinished jobs forgotten
        past ``MAX_ACCOUNTS`` (asked again at their next submission)."""
        recent = self.identity.recent
        recent[user] = None
        if len(recent) <= MAX_ACCOUNTS:
            return
        busy = self._busy_users()
        for old in list(recent):
            if len(recent) <= MAX_ACCOUNTS:
                break
            if old not in busy and old != user:
                del recent[old]
                self.post(NodeAccounts("", forget=(old,)))

    def _busy_users(self) -> set[str]:
        """The users of unfinished jobs, worked out at most once per scheduling pass: every
        node's re-check asks for them, and a scan of every job per heartbeat would not do on
        a cluster of 1,000 nodes and 100,000 jobs."""
        key = (id(self.ctrl), self.ctrl.cycle, len(self.ctrl.jobs))
        cached = self.identity.busy
        if cached is None or cached[0] != key:
            users = {r.job.spec.user for r in self.ctrl.jobs.values() if not r.job.finished}
            cached = self.identity.busy = (key, frozenset(users))
        return set(cached[1])

    def _ask(self, node: str, users: list[str]) -> None:
        self.outbox.put(node, AgentCommand(kind="accounts", job="", attempt=0, rank=0, users=users))
