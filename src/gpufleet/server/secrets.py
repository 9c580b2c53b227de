"""Job secrets: made, listed and removed through /secrets; checked when a job is submitted;
opened only when a launch is handed to its agent.

Who may do what: a user makes and removes its own (scope ``user``); queue and cluster secrets
are an admin's. A job may use its user's secrets, its queue's and the cluster's (a reference
without a scope takes the first of these that has the name; the submit fixes the scope it
found in the job's spec). Values are sealed (secrets_box.py) before they reach the store and
opened only into the poll answer that carries the launch to the agent: the outbox keeps the
reference, so no decrypted value is kept anywhere but in that answer on its way."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from fastapi import HTTPException

from gpufleet.api import schemas as s
from gpufleet.base.clock import Clock
from gpufleet.model.job import JobSpec
from gpufleet.model.secrets import SecretRef
from gpufleet.server.auth import Principal
from gpufleet.server.errors import FieldErrors
from gpufleet.server.secrets_box import DecryptError, Sealed, SecretBox, describe
from gpufleet.server.store import Store, StoreUnavailable
from gpufleet.server.store.secrets import SealedRow, SecretExists, SecretInfo

log = logging.getLogger("gpufleet.controller")
Key = tuple[str, str, str]  # (scope, owner, name)


def owner_for(scope: str, spec: JobSpec) -> str:
    """Whose secret a job's reference of that scope means: its user's, its queue's, ""."""
    return spec.user if scope == "user" else spec.queue if scope == "queue" else ""


def candidates(ref: SecretRef, spec: JobSpec) -> list[Key]:
    scopes = [ref.scope] if ref.scope else ["user", "queue", "cluster"]
    return [(sc, owner_for(sc, spec), ref.name) for sc in scopes]


def target(scope: str, owner: str, name: str) -> str:
    """An audit entry's target: which secret (never its value)."""
    return f"secret:{scope}:{owner}:{name}" if owner else f"secret:{scope}:{name}"


@dataclass(frozen=True, slots=True)
class Refused:
    """A launch that cannot be handed over: its secret is gone or does not open."""

    job: str
    attempt: int
    rank: int
    seq: int  # its place in the node's outbox
    why: str


class SecretService:
    def __init__(self, store: Store, box: SecretBox, clock: Clock) -> None:
        self.store = store
        self.box = box
        self.clock = clock

    # ----- /secrets -----------------------------------------------------------------------

    def owner_of(
        self,
        who: Principal,
        scope: str,
        user: str | None,
        queue: str | None,
        *,
        write: bool,
        where: str = "body",
    ) -> str:
        """The owner a request means, or 403/422 for one this caller may not name (``where``:
        body or query, for the 422's field)."""
        if scope == "user":
            if who.role == "admin":
                if not user:
                    raise FieldErrors(
                        [(f"{where}.user", "an admin token must say whose secret (--user)")]
                    )
                return user
            if user not in (None, who.user):
                raise HTTPException(403, f"this token's secrets are {who.user}'s, not {user}'s")
            return who.user or ""
        if write and who.role != "admin":
            raise HTTPException(
                403, f"{scope}-scoped secrets are made and removed with an admin token"
            )
        if scope == "queue":
            if not queue:
                raise FieldErrors(
                    [(f"{where}.queue", "a queue-scoped secret needs its queue (--queue)")]
                )
            return queue
        return ""

    def create(
        self, who: Principal, scope: str, owner: str, name: str, value: str, *, replace: bool
    ) -> SecretInfo:
        now = self.clock.now()
        sealed = self.box.seal(value, scope, owner, name)
        info = SecretInfo(scope, owner, name, who.name, now, now, None)
        detail = {"scope": scope, "owner": owner, "name": name, "replace": replace}
        audit = (who.name, who.role, "secret.create", target(scope, owner, name), detail)
        try:
            self.store.put_secret(
                info, sealed.key_id, sealed.nonce, sealed.ciphertext, replace=replace, audit=audit
            )
        except SecretExists as e:
            raise HTTPException(409, f"{describe(scope, owner)} {e}") from None
        got = self.store.secret(scope, owner, name)
        return got.info if got is not None else info

    def listing(self, who: Principal, scope: str | None) -> list[SecretInfo]:
        """An admin sees every secret; a user its own, its queues' and the cluster's (names
        only: it needs them to use them)."""
        rows: list[SecretInfo] = self.store.secrets(scope=scope)
        if who.role == "admin":
            return rows
        return [r for r in rows if r.scope != "user" or r.owner == who.user]

    def remove(self, who: Principal, scope: str, owner: str, name: str) -> None:
        detail = {"scope": scope, "owner": owner, "name": name}
        audit = (who.name, who.role, "secret.delete", target(scope, owner, name), detail)
        if not self.store.delete_secret(scope, owner, name, now=self.clock.now(), audit=audit):
            raise HTTPException(404, f"{describe(scope, owner)} secret {name!r} does not exist")

    # ----- submit -------------------------------------------------------------------------

    def resolve(self, spec: JobSpec, where: str = "body.spec") -> JobSpec:
        """The spec with each secret's scope fixed; 422 naming each secret the job may not use
        or that does not exist (all at once)."""
        if not spec.secrets:
            return spec
        cands = [candidates(r, spec) for r in spec.secrets]
        found = self.store.secrets_exist({k for c in cands for k in c})
        out: list[SecretRef] = []
        problems: list[tuple[str, str]] = []
        for i, (ref, keys) in enumerate(zip(spec.secrets, cands, strict=True)):
            hit = next((k for k in keys if k in found), None)
            if hit is not None:
                out.append(replace(ref, scope=hit[0]))
                continue
            mine = " or ".join(describe(sc, ow) for sc, ow, _ in keys)
            problems.append(
                (
                    f"{where}.secrets[{i}].name",
                    f"secret {ref.name!r} does not exist or this job may not use it "
                    f"(looked for {mine})",
                )
            )
        if problems:
            raise FieldErrors(problems)
        return replace(spec, secrets=tuple(out))

    # ----- launch -------------------------------------------------------------------------

    def hand_over(
        self, node: str, cmds: list[s.AgentCommand], users: dict[str, str]
    ) -> tuple[list[s.AgentCommand], list[Refused]]:
        """The poll's answer with each launch's secrets opened, and the launches that cannot
        go (a secret deleted since the submit, or one that does not open): those fail with a
        Reason. While the store is unavailable the answer stops before the first launch that
        needs it: the rest stay queued (unacknowledged) for the next poll. ``users``: each
        job's user, for the audit entries."""
        out: list[s.AgentCommand] = []
        refused: list[Refused] = []
        used: set[Key] = set()
        audits: list[tuple[str, str, str, str, dict[str, Any]]] = []
        try:  # one read for the whole answer
            rows = self.store.secret_rows(
                {(t.scope, t.owner, t.name) for c in cmds for t in c.secrets}
            )
        except StoreUnavailable as e:
            log.warning("poll of %s: launches with secrets wait: %s", node, e)
            return _prefix(cmds), []
        for c in cmds:
            if not c.secrets:
                out.append(c)
                continue
            filled, why = self._open(c, rows)
            if why:
                refused.append(Refused(c.job, c.attempt, c.rank, c.seq, why))
                continue
            out.append(filled)
            for t in c.secrets:
                key = (t.scope, t.owner, t.name)
                detail = {"job": c.job, "attempt": c.attempt, "rank": c.rank, "node": node}
                detail["as"] = f"env {t.env}" if t.env else f"file {t.file}"
                user = users.get(c.job, "")
                audits.append((user, "job", "secret.use", target(*key), detail))
                used.add(key)
        if used:
            try:
                self.store.secrets_used(used, audits, self.clock.now())
            except StoreUnavailable as e:  # the audit entry must be written before the use
                log.warning("poll of %s: launches with secrets wait: %s", node, e)
                return _prefix(out), refused
        return out, refused

    def _open(self, c: s.AgentCommand, rows: dict[Key, SealedRow]) -> tuple[s.AgentCommand, str]:
        filled: list[s.TaskSecret] = []
        for t in c.secrets:
            row = rows.get((t.scope, t.owner, t.name))
            what = f"secret {t.name!r} ({describe(t.scope, t.owner)})"
            if row is None:
                return c, f"{what} no longer exists: it was deleted after the job was submitted"
            try:
                value = self.box.open(
                    Sealed(row.key_id, row.nonce, row.ciphertext), t.scope, t.owner, t.name
                )
            except DecryptError as e:
                log.error("%s", e)
                return c, f"{what} cannot be opened by the controller: {e}"
            # model_construct: its fields were validated when the launch was made (the copy
            # model_copy makes of each cost more than the decryption)
            filled.append(s.TaskSecret.model_construct(**{**t.__dict__, "value": value}))
        return c.model_copy(update={"secrets": filled}), ""


def _prefix(cmds: list[s.AgentCommand]) -> list[s.AgentCommand]:
    """The commands before the first that carries secrets (the rest wait, unacknowledged)."""
    first = next((i for i, c in enumerate(cmds) if c.secrets), len(cmds))
    return cmds[:first]


def refs_for_launch(spec: JobSpec) -> list[s.TaskSecret]:
    """What a launch command carries of its job's secrets: references, never values."""
    return [
        s.TaskSecret(
            name=r.name,
            scope=r.scope or "user",
            owner=owner_for(r.scope or "user", spec),
            env=r.env,
            file=r.file,
            value="",  # filled in only in the poll's answer that hands the launch on
        )
        for r in spec.secrets
    ]


def refused_events(refused: Sequence[Refused]) -> list[s.AgentEvent]:
    return [
        s.AgentEvent(
            kind="exited", job=r.job, attempt=r.attempt, rank=r.rank, exit_code=125, why=r.why
        )
        for r in refused
    ]
