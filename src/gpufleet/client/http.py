"""Thin typed wrappers over ``/api/v1``: one method per endpoint, pydantic models in and out."""

from __future__ import annotations

import os
import ssl
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Self, TypeVar

import httpx
from pydantic import BaseModel, ValidationError

from gpufleet.api import schemas as s
from gpufleet.api import secrets as sec
from gpufleet.api import services as svc
from gpufleet.client.errors import ApiError

M = TypeVar("M", bound=BaseModel)
API = "/api/v1"
PAGE_MAX = 1000  # the server's largest page of GET /jobs (server/listing.py)


class CommandsUnreadable(ValueError):
    """A poll's answer that does not parse; its message quotes no value."""


def tls_verify(
    ca: str | Path | None = None, env: Mapping[str, str] = os.environ
) -> ssl.SSLContext | bool:
    """How an https controller is verified: against the CA file ``ca`` (else ``$GPUFLEET_CA``),
    which a cluster with its own CA hands out, or else against the system's trusted CAs.

    A missing or unreadable CA file raises ``ValueError`` naming it: falling back to the system
    CAs would turn a typo into a refusal that is hard to explain."""
    path = ca or env.get("GPUFLEET_CA") or None
    if path is None:
        return True
    try:
        return ssl.create_default_context(cafile=str(Path(path).expanduser()))
    except (OSError, ssl.SSLError) as e:
        raise ValueError(f"CA file {path}: cannot load it ({e})") from None


def _trusts_no_one() -> ssl.SSLContext:
    """Verifies certificates and host names, against no CA at all: every https peer fails."""
    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)


class _Base:
    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        ca: str | Path | None = None,
        transport: httpx.BaseTransport | None = None,
        timeout: float = 30.0,
    ) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        verify = tls_verify(ca)
        if verify is True and not base_url.lower().startswith("https://"):
            # a plain-http server: loading the trusted CAs (httpx builds the context up front)
            # costs a command tens of ms for nothing; an https URL met on the way (a Link) is
            # refused by this context that trusts no one, never sent unverified
            verify = _trusts_no_one()
        self.http = httpx.Client(
            base_url=base_url.rstrip("/"),
            headers=headers,
            transport=transport,
            timeout=timeout,
            verify=verify,
        )

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict[str, Any] | None = None,
        timeout: float | None = None,
    ) -> Any:
        kwargs: dict[str, Any] = {}
        if timeout is not None:
            kwargs["timeout"] = timeout
        r = self._send(method, API + path, json=json, params=params, **kwargs)
        return r.json() if r.content else None

    def _send(
        self,
        method: str,
        url: str,
        *,
        json: Any = None,
        params: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> httpx.Response:
        if params:
            params = {k: v for k, v in params.items() if v is not None}
        r = self.http.request(method, url, json=json, params=params, **kwargs)
        if r.status_code >= 400:
            try:
                detail = r.json().get("detail", r.text)
            except ValueError:
                detail = r.text
            raise ApiError(r.status_code, detail)
        return r

    def _one(self, model: type[M], method: str, path: str, **kw: Any) -> M:
        return model.model_validate(self._call(method, path, **kw))

    def _many(self, model: type[M], method: str, path: str, **kw: Any) -> list[M]:
        return [model.model_validate(x) for x in self._call(method, path, **kw)]


class Client(_Base):
    """What a user or an admin does."""

    def submit(
        self,
        spec: dict[str, Any],
        *,
        array: str | None = None,
        depends_on: Sequence[tuple[str, str]] = (),
        idempotency_key: str | None = None,
    ) -> list[str]:
        body = s.JobSubmit(
            spec=spec,
            array=array,
            depends_on=[s.Dependency.model_validate({"type": t, "job": j}) for t, j in depends_on],
            idempotency_key=idempotency_key,
        )
        return self._one(s.SubmitResult, "POST", "/jobs", json=body.model_dump()).ids

    def jobs(
        self,
        *,
        user: str | None = None,
        queue: str | None = None,
        state: str | None = None,
        limit: int = 200,
        all_states: bool = False,
    ) -> list[s.JobOut]:
        """Up to ``limit`` jobs, newest first, following the server's pages (``Link: <…>;
        rel="next"``; a page holds at most PAGE_MAX jobs)."""
        params: dict[str, Any] | None = {
            "user": user,
            "queue": queue,
            "state": state,
            "limit": min(limit, PAGE_MAX),
            "all": str(all_states).lower(),
        }
        path: str | None = API + "/jobs"
        out: list[s.JobOut] = []
        while path is not None and len(out) < limit:
            r = self._send("GET", path, params=params)
            out += [s.JobOut.model_validate(x) for x in r.json()]
            nxt = r.links.get("next", {}).get("url")
            # the next page's URL carries every parameter; only its size shrinks near the end
            path, params = nxt, None
            if nxt is not None and limit - len(out) < PAGE_MAX:
                u = httpx.URL(nxt)
                path = str(u.copy_set_param("limit", max(1, limit - len(out))))
        return out[:limit]

    def all_jobs(
        self, *, user: str | None = None, queue: str | None = None, page: int = PAGE_MAX
    ) -> Iterator[s.JobOut]:
        """Every job the token may see, in every state, newest first, one page at a time
        (following ``Link: <…>; rel="next"``): for exports too large for one list."""
        params: dict[str, Any] | None = {
            "user": user,
            "queue": queue,
            "limit": max(1, min(page, PAGE_MAX)),
            "all": "true",
        }
        path: str | None = API + "/jobs"
        while path is not None:
            r = self._send("GET", path, params=params)
            yield from (s.JobOut.model_validate(x) for x in r.json())
            path, params = r.links.get("next", {}).get("url"), None

    def job(self, job_id: str) -> s.JobOut:
        return self._one(s.JobOut, "GET", f"/jobs/{job_id}")

    def cancel(self, job_id: str) -> s.JobOut:
        return self._one(s.JobOut, "POST", f"/jobs/{job_id}/cancel")

    def logs(
        self, job_id: str, *, rank: int = 0, stream: str = "stdout", offset: int = 0
    ) -> s.LogOut:
        return self._one(
            s.LogOut,
            "GET",
            f"/jobs/{job_id}/logs",
            params={"rank": rank, "stream": stream, "offset": offset},
        )

    def nodes(self) -> list[s.NodeOut]:
        return self._many(s.NodeOut, "GET", "/nodes")

    def drain(self, node: str, reason: str = "drained by admin") -> s.NodeOut:
        return self._one(
            s.NodeOut,
            "POST",
            f"/nodes/{node}/drain",
            json=s.DrainRequest(reason=reason).model_dump(),
        )

    def resume(self, node: str) -> s.NodeOut:
        return self._one(s.NodeOut, "POST", f"/nodes/{node}/resume")

    def queues(self) -> list[s.QueueOut]:
        return self._many(s.QueueOut, "GET", "/queues")

    def update_queue(self, name: str, update: s.QueueUpdate) -> s.QueueOut:
        return self._one(
            s.QueueOut, "PUT", f"/queues/{name}", json=update.model_dump(exclude_none=True)
        )

    def accounting(
        self, *, since: float | None = None, until: float | None = None, by: str = "user"
    ) -> list[s.AccountingRow]:
        return self._many(
            s.AccountingRow, "GET", "/accounting", params={"since": since, "until": until, "by": by}
        )

    def create_token(self, req: s.TokenCreate) -> s.TokenOut:
        return self._one(s.TokenOut, "POST", "/tokens", json=req.model_dump())

    def tokens(self) -> list[s.TokenOut]:
        return self._many(s.TokenOut, "GET", "/tokens")

    def revoke_token(self, name: str) -> None:
        self._call("DELETE", f"/tokens/{name}")

    def create_secret(self, req: sec.SecretCreate) -> sec.SecretOut:
        """The value goes in the request body only (never a URL or argv)."""
        return self._one(sec.SecretOut, "POST", "/secrets", json=req.model_dump())

    def secrets(self, scope: str | None = None) -> list[sec.SecretOut]:
        params = {"scope": scope} if scope else None
        return self._many(sec.SecretOut, "GET", "/secrets", params=params)

    def delete_secret(
        self, name: str, scope: str = "user", *, user: str | None = None, queue: str | None = None
    ) -> None:
        params = {
            "scope": scope,
            **({"user": user} if user else {}),
            **({"queue": queue} if queue else {}),
        }
        self._call("DELETE", f"/secrets/{name}", params=params)

    def create_service(self, spec: dict[str, Any]) -> svc.ServiceOut:
        return self._one(svc.ServiceOut, "POST", "/services", json={"spec": spec})

    def services(self) -> list[svc.ServiceOut]:
        return self._many(svc.ServiceOut, "GET", "/services")

    def service(self, name: str, events: int = 50) -> svc.ServiceOut:
        return self._one(svc.ServiceOut, "GET", f"/services/{name}", params={"events": events})

    def update_service(
        self, name: str, spec: dict[str, Any], *, replace: bool = False
    ) -> svc.ServiceOut:
        """``replace``: the whole new spec (PUT); else a JSON merge patch of it (PATCH)."""
        method = "PUT" if replace else "PATCH"
        return self._one(svc.ServiceOut, method, f"/services/{name}", json={"spec": spec})

    def scale_service(
        self,
        name: str,
        replicas: int | None = None,
        *,
        minimum: int | None = None,
        maximum: int | None = None,
    ) -> svc.ServiceOut:
        body = {
            k: v
            for k, v in (("replicas", replicas), ("min", minimum), ("max", maximum))
            if v is not None
        }
        return self._one(svc.ServiceOut, "POST", f"/services/{name}/scale", json=body)

    def rotate_service_token(self, name: str) -> svc.ServiceOut:
        """A new endpoint token (in ``endpoint.token`` of the answer, and nowhere else)."""
        return self._one(svc.ServiceOut, "POST", f"/services/{name}/token")

    def delete_service(self, name: str) -> None:
        self._call("DELETE", f"/services/{name}")

    def audit(self, limit: int = 100) -> list[s.AuditOut]:
        return self._many(s.AuditOut, "GET", "/audit", params={"limit": limit})

    def health(self) -> dict[str, Any]:
        r = self.http.get("/healthz")
        return dict(r.json())


class AgentClient(_Base):
    """What a node agent does: register, heartbeat, long-poll commands, report events."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._acked: dict[str, int] = {}  # per node: the highest command seq received

    def register(self, req: s.AgentRegister) -> s.RegisterResult:
        res = self._one(s.RegisterResult, "POST", "/agent/register", json=req.model_dump())
        # a new registration starts a new delivery (the controller may have restarted, its
        # queues gone): what we acknowledged before says nothing about them
        self._acked.pop(req.node, None)
        return res

    def heartbeat(self, node: str, hb: s.Heartbeat) -> s.HeartbeatResult:
        return self._one(
            s.HeartbeatResult, "POST", f"/agent/{node}/heartbeat", json=hb.model_dump()
        )

    def commands(self, node: str, wait_s: float = 20.0) -> list[s.AgentCommand]:
        """Long-poll: returns as soon as there are commands, or empty after ``wait_s``. Each
        poll acknowledges what the previous one brought; an answer lost on the way comes again
        (the agent runs a redelivered launch once), so nothing sent is lost with a connection."""
        try:
            batch = self._one(
                s.CommandBatch,
                "GET",
                f"/agent/{node}/commands",
                params={"wait": wait_s, "ack": self._acked.get(node, 0)},
                timeout=wait_s + 10.0,
            )
        except ValidationError as e:
            # pydantic's message quotes the input, and a launch carries its job's secrets:
            # say where and what, never the value (a newer controller's field, say)
            where = "; ".join(
                f"{'.'.join(map(str, x['loc']))}: {x['msg']}"
                for x in e.errors(include_input=False, include_url=False)[:5]
            )
            raise CommandsUnreadable(f"the controller's commands do not parse: {where}") from None
        if batch.commands:
            self._acked[node] = max(self._acked.get(node, 0), *(c.seq for c in batch.commands))
        return batch.commands

    def events(self, node: str, events: list[s.AgentEvent]) -> None:
        self._call("POST", f"/agent/{node}/events", json=s.AgentEvents(events=events).model_dump())

    def logs(self, node: str, chunk: s.LogChunk) -> None:
        self._call("POST", f"/agent/{node}/logs", json=chunk.model_dump())
