"""The controller service's requests about services: read and check a spec (every problem at
once), check who may see or change a service, and hand the change to the core as an event
whose audit entry commits with what it caused (the service's row, its new replica jobs:
``journal.py``). ``ControllerService`` inherits these; the routers stay thin."""

from __future__ import annotations

import asyncio
from typing import Any

from gpufleet.api.services import MAX_SERVICE_NAME, ServiceOut
from gpufleet.core.events import (
    ServiceCreated,
    ServiceDeleted,
    ServiceScaled,
    ServiceUpdated,
)
from gpufleet.core.services import Service
from gpufleet.model.errors import SpecError
from gpufleet.model.service import ServiceSpec, ServiceSpecError
from gpufleet.server.admission import unknown_queue
from gpufleet.server.auth import Principal
from gpufleet.server.errors import FieldErrors
from gpufleet.server.refusals import Conflict, Forbidden, NotFound, Unavailable
from gpufleet.server.service.requests import Requests
from gpufleet.server.service_views import endpoint_out, service_out
from gpufleet.server.stepenv import desktop_key

# a desktop with no token to open it (none active): a digest no token has, so the route
# stays a desktop's (an empty list would make it an ordinary service's, its token let in)
NO_VIEWER = "0" * 64
ROTATE_WAIT_S = 60.0  # the longest a token rotation waits for the proxy's reload


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: a mapping patches key by key (null removes one), anything else replaces."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


class ServiceRequests(Requests):
    # ----- reading and checking --------------------------------------------------------

    def read_service(
        self, raw: dict[str, Any], who: Principal, *, owner: str | None = None, at: str = "body"
    ) -> ServiceSpec:
        """The spec of a request, the replica's user set as for a job (a user token's own;
        ``owner``: an existing service keeps its owner). 422 listing every problem."""
        problems: list[tuple[str, str]] = []
        raw = dict(raw)
        rep = raw.get("replica")
        if isinstance(rep, dict):
            rep = dict(rep)
            given = rep.get("user")
            if who.role == "user" and given not in (None, who.user):
                raise Forbidden(f"this token runs services as {who.user}, not {given}")
            keep = owner or (who.user if who.role == "user" else None)
            if owner is not None and given not in (None, owner):
                problems.append((f"{at}.spec.replica.user", f"a service keeps its owner {owner}"))
            rep["user"] = keep or given or who.name
            raw["replica"] = rep
        spec: ServiceSpec | None = None
        try:
            spec = ServiceSpec.from_dict(raw, source="request", path="spec")
        except ServiceSpecError as e:
            problems += [(f"{at}.{f}" if f else at, m) for f, m in e.problems]
        except SpecError as e:
            problems.append((f"{at}.{e.field}" if e.field else at, e.reason))
        name = raw.get("name")
        if isinstance(name, str) and len(name) > MAX_SERVICE_NAME:
            problems.append(
                (
                    f"{at}.spec.name",
                    f"must be at most {MAX_SERVICE_NAME} characters (a replica's job id is "
                    f"'<name>.<n>'), got {len(name)}",
                )
            )
        problems += self._queue_problems(spec, rep, at)
        if problems:
            raise FieldErrors(dict.fromkeys(problems))  # each once, in order
        assert spec is not None
        return spec

    def _queue_problems(self, spec: ServiceSpec | None, rep: Any, at: str) -> list[tuple[str, str]]:
        known = self.configured_queues()
        if spec is not None:
            named = [spec.replica.queue, *spec.replica.queues]
        elif isinstance(rep, dict) and isinstance(rep.get("queue"), str):
            named = [rep["queue"]]
        else:
            return []
        return [
            (f"{at}.spec.replica.queue", unknown_queue(q, known))
            for q in dict.fromkeys(named)
            if q not in known
        ]

    def owned_service(self, name: str, who: Principal) -> Service:
        """The service, if this token may see it: 404 when there is none, 403 when it is
        another user's."""
        svc = self.ctrl.services.services.get(name)
        if svc is None:
            raise NotFound(f"no service {name}")
        owner = svc.spec.replica.user
        if who.role == "user" and owner != who.user:
            raise Forbidden(f"service {name} belongs to {owner}; this token is {who.user}'s")
        return svc

    def service_view(
        self, svc: Service, events: int | None = None, *, token: bool = False
    ) -> ServiceOut:
        """What the API shows of it; ``events``: with its newest events (from the store);
        ``token``: with its endpoint's token (only the answer that made the token)."""
        history = None if events is None else self.store.service_events(svc.name, events)
        endpoint, serving = None, None
        if self.gateway is not None:
            serving = self.gateway.serving.get(svc.name, frozenset())
            e = self.gateway.book.endpoint(svc.name) if token else self.gateway.book.get(svc.name)
            if e is not None:
                host = self.gateway.gateway.bind_host
                endpoint = endpoint_out(host, e.port, e.token if token else None)
        return service_out(svc, self.ctrl, history, endpoint, serving)

    def desktop_viewers(self, name: str) -> tuple[str, ...]:
        """Who may open a desktop's endpoint: the SHA-256 of its owner's active user tokens
        and of the admins' (the gateway checks a client's own token against them); () for
        a service that is no desktop."""
        svc = self.ctrl.services.services.get(name)
        if svc is None or svc.spec.desktop is None:
            return ()
        owner = svc.spec.replica.user
        digests = sorted(
            h
            for h, t in self.store.active_tokens()
            if t.role == "admin" or (t.role == "user" and t.user == owner)
        )
        return tuple(digests) or (NO_VIEWER,)

    def desktop_key(self, name: str, job_id: str) -> str:
        """The key the gateway presents to a desktop's replica ("" for another service's)."""
        svc = self.ctrl.services.services.get(name)
        if svc is None or svc.spec.desktop is None:
            return ""
        return desktop_key(self.desktop_secret, job_id)

    def visible_services(self, who: Principal) -> list[Service]:
        svcs = sorted(self.ctrl.services.services.values(), key=lambda s: s.name)
        if who.role == "user":
            svcs = [s for s in svcs if s.spec.replica.user == who.user]
        return svcs

    # ----- changes (each returns once it and its audit entry committed) ----------------

    def _openable(self, spec: ServiceSpec) -> None:
        """A desktop is refused (409, said plainly) where no one could open it: without a
        gateway. Every proxy checks a viewer's own token (nginx through its viewer check,
        ADR 0057)."""
        if spec.desktop is not None and self.gateway is None:
            raise Conflict(
                "a desktop is opened through the service gateway, and this controller runs "
                "none (--gateway off): run it with --gateway haproxy, nginx or builtin"
            )

    async def create_service(self, spec: ServiceSpec, who: Principal) -> Service:
        if spec.name in self.ctrl.services.services:
            raise Conflict(f"service {spec.name} exists already")
        self._openable(spec)
        first = self.store.service_next_index(spec.name)
        detail = {"replicas": spec.initial_replicas, "queue": spec.replica.queue}
        await self.event(
            ServiceCreated(spec, first), (who.name, who.role, "service.create", spec.name, detail)
        )
        return self.owned_service(spec.name, who)

    async def update_service(self, spec: ServiceSpec, who: Principal) -> Service:
        old = self.owned_service(spec.name, who)
        self._openable(spec)
        before = old.generation
        await self.event(
            ServiceUpdated(spec),
            (who.name, who.role, "service.update", spec.name, {"from_generation": before}),
        )
        return self.owned_service(spec.name, who)

    async def scale_service(
        self,
        name: str,
        who: Principal,
        replicas: int | None,
        lo: int | None = None,
        hi: int | None = None,
    ) -> Service:
        svc = self.owned_service(name, who)
        if replicas is None and lo is None and hi is None:
            raise FieldErrors([("body", "give replicas, or min and/or max")])
        if lo is not None or hi is not None:
            bounds = {k: v for k, v in (("min", lo), ("max", hi)) if v is not None}
            raw = merge_patch(svc.spec.to_dict(), bounds)
            if replicas is not None:
                raw["replicas"] = replicas
            elif svc.spec.autoscale is not None:
                a = svc.spec.autoscale
                raw["replicas"] = max(
                    lo if lo is not None else a.min, min(svc.desired, hi or a.max)
                )
            spec = self.read_service(raw, who, owner=svc.spec.replica.user)
            await self.update_service(spec, who)
            return self.owned_service(name, who)
        assert replicas is not None
        if svc.spec.autoscale is not None:
            a = svc.spec.autoscale
            if not a.min <= replicas <= a.max:
                raise FieldErrors(
                    [
                        (
                            "body.replicas",
                            f"must be within min and max ({a.min}-{a.max}), got {replicas}",
                        )
                    ]
                )
        await self.event(
            ServiceScaled(name, replicas),
            (who.name, who.role, "service.scale", name, {"replicas": replicas}),
        )
        return self.owned_service(name, who)

    async def rotate_service_token(self, name: str, who: Principal) -> Service:
        """A new token for the service's endpoint (audited before it takes effect); returns
        once the proxy serves it, so the old one is refused by then. 503 when the proxy
        refused the new config (the old token still works until an apply succeeds)."""
        svc = self.owned_service(name, who)
        if self.gateway is None:
            raise Conflict("the controller runs no gateway (--gateway off): no endpoint")
        self.store.audit(who.name, who.role, "service.token", name, {})
        self.gateway.rotate(name)
        try:
            await asyncio.wait_for(asyncio.wrap_future(self.gateway.applied), ROTATE_WAIT_S)
        except Exception as e:  # a refused config or a timeout: the old token serves on
            raise Unavailable(
                f"the gateway has not applied the new token ({e or type(e).__name__})"
            ) from None
        return svc

    async def delete_service(self, name: str, who: Principal) -> None:
        self.owned_service(name, who)
        await self.event(ServiceDeleted(name), (who.name, who.role, "service.delete", name, {}))
