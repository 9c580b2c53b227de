"""Every call of ``/api/v1``, once, over any ``transport.Transport`` (issue 27: the typed SDK
and the shims' lean client were two copies of these).

A ``Calls`` answers either with the API's pydantic models (``typed=True``: ``http.Client``,
the SDK) or with ``Row``s (``lean.LeanClient``: the Slurm shims and the CLI's fast paths, which
must not import pydantic): the server's JSON, its fields readable as attributes (``job.state``,
``job.reason.code``), the models' names. The models are named by ``Ref`` and imported only by a
typed client, so this module costs no more than ``_json`` (``base/jsonc.py``)."""

from __future__ import annotations

from gpufleet.base import jsonc
from gpufleet.client.errors import ApiError
from gpufleet.client.staleness import ALLOW_HEADER, Staleness

# Neither typing nor urllib.parse at run time (issue 27): a shim's start is its imports, and
# these were a quarter of them; a query or a path segment of plain characters is written here,
# anything else by urllib.parse, imported then. mypy reads the TYPE_CHECKING branches.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence
    from typing import Any, Generic, Self, TypeVar

    from gpufleet.api import accounting as acc
    from gpufleet.api import dashboard as dash
    from gpufleet.api import maintenance as mt
    from gpufleet.api import nodecommands as nc
    from gpufleet.api import reservations as resv
    from gpufleet.api import schemas as s
    from gpufleet.api import secrets as sec
    from gpufleet.api import services as svc
    from gpufleet.client.transport import Response, Transport

API = "/api/v1"
PAGE_MAX = 1000  # the server's largest page of GET /jobs (server/listing.py)
# what urllib.parse's quote_plus and quote(safe="") leave as it is
_PLAIN = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-~")


if TYPE_CHECKING:
    _Dict = dict[str, Any]
else:
    _Dict = dict


class Row(_Dict):
    """A JSON object whose keys read as attributes too."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


if TYPE_CHECKING:
    M = TypeVar("M")

    class _Generic(Generic[M]):
        pass

else:  # Ref[X] is read by mypy only (annotations are strings at run time)
    M = None

    class _Generic:
        def __class_getitem__(cls, item: object) -> type:
            return cls


class Ref(_Generic[M]):
    """A model of ``gpufleet.api``, by name: imported when a typed client first decodes one."""

    __slots__ = ("module", "name")

    def __init__(self, module: str, name: str) -> None:
        self.module, self.name = module, name

    def load(self) -> Any:
        import importlib

        return getattr(importlib.import_module(f"gpufleet.api.{self.module}"), self.name)


def _plain(text: str) -> bool:
    return all(ch in _PLAIN for ch in text)


def segment(text: str) -> str:
    """``text`` as one path segment (``quote(text, safe="")``)."""
    if _plain(text):
        return text
    from urllib.parse import quote

    return quote(text, safe="")


def query(params: dict[str, Any]) -> str:
    """``urlencode(params)``, its values written by ``str``."""
    pairs = [(str(k), str(v)) for k, v in params.items()]
    if all(_plain(k) and _plain(v) for k, v in pairs):
        return "&".join(f"{k}={v}" for k, v in pairs)
    from urllib.parse import urlencode

    return urlencode(pairs)


JOB: Ref[s.JobOut] = Ref("schemas", "JobOut")
SUBMIT: Ref[s.JobSubmit] = Ref("schemas", "JobSubmit")
LOG: Ref[s.LogOut] = Ref("schemas", "LogOut")
NODE: Ref[s.NodeOut] = Ref("schemas", "NodeOut")
USER_ACCOUNTS: Ref[s.UserAccountsOut] = Ref("schemas", "UserAccountsOut")
DRAIN: Ref[s.DrainRequest] = Ref("schemas", "DrainRequest")
QUEUE: Ref[s.QueueOut] = Ref("schemas", "QueueOut")
ACCOUNTING: Ref[s.AccountingRow] = Ref("schemas", "AccountingRow")
ENTITLEMENT: Ref[acc.EntitlementOut] = Ref("accounting", "EntitlementOut")
TOKEN: Ref[s.TokenOut] = Ref("schemas", "TokenOut")
AUDIT: Ref[s.AuditOut] = Ref("schemas", "AuditOut")
NODE_COMMAND: Ref[nc.NodeCommandOut] = Ref("nodecommands", "NodeCommandOut")
NODE_HISTORY: Ref[dash.NodeHistoryOut] = Ref("dashboard", "NodeHistoryOut")
MAINTENANCE: Ref[mt.MaintenanceOut] = Ref("maintenance", "MaintenanceOut")
SECRET: Ref[sec.SecretOut] = Ref("secrets", "SecretOut")
SERVICE: Ref[svc.ServiceOut] = Ref("services", "ServiceOut")
RESERVATION: Ref[resv.ReservationOut] = Ref("reservations", "ReservationOut")


def next_page(resp: Response) -> str | None:
    """The path and query of the ``Link: <…>; rel="next"`` page (RFC 8288), if any."""
    link = _next_link(resp.headers.get("link", ""))
    if link is None:
        return None
    if link.startswith("/") and not link.startswith("//"):  # a path: the server's own form
        path, _, q = link.partition("#")[0].partition("?")
        return f"{path}?{q}" if q else path
    from urllib.parse import urlsplit

    n = urlsplit(link)
    return f"{n.path}?{n.query}" if n.query else n.path


def _next_link(header: str) -> str | None:
    """The target of the header's ``rel="next"`` link: ``<…>; rel="next"`` (parameters in any
    order, the relation quoted or not, several links split by commas), without ``re`` (issue
    27: ``re`` and the ``enum`` it imports are a fifth of a shim's start)."""
    for part in header.split("<")[1:]:
        target, sep, params = part.partition(">")
        if not sep:
            continue
        for param in params.split(",")[0].split(";"):
            name, _, value = param.partition("=")
            rels = value.strip().strip('"').lower().split()
            if name.strip().lower() == "rel" and "next" in rels:
                return target
    return None


def with_limit(target: str, limit: int) -> str:
    """``target`` with its ``limit`` parameter set to ``limit`` (the last page's size), the
    others as they were, in their order."""
    from urllib.parse import parse_qsl, urlencode

    path, _, q = target.partition("?")
    pairs = parse_qsl(q, keep_blank_values=True)
    if not any(k == "limit" for k, _ in pairs):
        pairs.append(("limit", ""))
    return f"{path}?{urlencode([(k, str(limit) if k == 'limit' else v) for k, v in pairs])}"


class Calls:
    """The transport's requests and answers: auth, refusals (``ApiError``), JSON, pages."""

    def __init__(
        self, transport: Transport, token: str | None = None, *, base: str = "", typed: bool
    ) -> None:
        self.transport = transport
        self.base = base.rstrip("/")  # a controller behind a prefix: https://host/fleet
        self.typed = typed
        self.headers = {"Accept": "application/json", "Accept-Encoding": "identity"}
        if token:
            self.headers["Authorization"] = f"Bearer {token}"
        self.staleness = Staleness("", 0, True)  # of the last answer (allow_stale)

    def allow_stale(self, allow: bool = True) -> None:
        """Let a standby controller answer the reads it serves from the store (jobs, a job,
        nodes) instead of pointing to the leader; ``staleness`` says how old each may be."""
        if allow:
            self.headers[ALLOW_HEADER] = "true"
        else:
            self.headers.pop(ALLOW_HEADER, None)

    def close(self) -> None:
        self.transport.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----- requests and answers ------------------------------------------------------------

    def send(
        self,
        method: str,
        target: str,
        *,
        params: dict[str, Any] | None = None,
        json_body: Any = None,
        timeout: float | None = None,
    ) -> tuple[Any, Response]:
        """(the answer's JSON, the answer); ``target``: a path under the server's base."""
        if params:
            q = query({k: v for k, v in params.items() if v is not None})
            target = f"{target}?{q}" if q else target
        headers = self.headers
        body = None
        if json_body is not None:
            body = jsonc.dumps(json_body).encode()
            headers = {**headers, "Content-Type": "application/json"}
        r = self.transport.request(method, self.base + target, headers, body, timeout=timeout)
        self.staleness = Staleness.of(r.headers)
        hook = None if self.typed else Row
        if r.status >= 400:
            try:
                doc = jsonc.loads(r.body) if r.body else None
            except ValueError:  # a proxy's HTML page, say: its text is the detail
                doc = None
            text = r.body.decode("utf-8", "replace")
            if isinstance(doc, dict):
                raise ApiError(r.status, doc.get("detail", text), doc.get("errors", ()))
            raise ApiError(r.status, text)
        return (jsonc.loads(r.body, object_hook=hook) if r.body else None), r

    def call(self, method: str, path: str, **kw: Any) -> Any:
        return self.send(method, API + path, **kw)[0]

    def one(self, model: Ref[M], method: str, path: str, **kw: Any) -> M:
        return self.decode(model, self.call(method, path, **kw))

    def many(self, model: Ref[M], method: str, path: str, **kw: Any) -> list[M]:
        return [self.decode(model, x) for x in self.call(method, path, **kw)]

    def decode(self, model: Ref[M], doc: Any) -> M:
        decoded: M = model.load().model_validate(doc) if self.typed else doc
        return decoded

    def body(self, model: Ref[Any], doc: dict[str, Any]) -> Any:
        """A request's body: checked by its model first on a typed client (the server checks
        it in any case)."""
        return model.load().model_validate(doc).model_dump() if self.typed else doc

    def pages(
        self, params: dict[str, Any], limit: int | None = None
    ) -> Iterator[tuple[list[Any], int]]:
        """GET /jobs page by page, following ``Link``: (its jobs, how many so far); the next
        page's URL carries every parameter, only its size shrinks near ``limit``."""
        target: str | None = API + "/jobs"
        got = 0
        while target is not None and (limit is None or got < limit):
            rows, r = self.send("GET", target, params=params)
            got += len(rows)
            yield rows, got
            target, params = next_page(r), {}
            if target is not None and limit is not None and limit - got < PAGE_MAX:
                target = with_limit(target, max(1, limit - got))


class UserCalls(Calls):
    """What a user or an admin does."""

    def submit(
        self,
        spec: dict[str, Any],
        *,
        array: str | None = None,
        depends_on: Sequence[tuple[str, str]] = (),
        idempotency_key: str | None = None,
        probe: bool = False,
    ) -> list[str]:
        """``probe``: a validation probe, run as the controller's probe account (admins)."""
        deps = [{"type": t, "job": j} for t, j in depends_on]
        doc: dict[str, Any] = {"spec": spec, "array": array, "depends_on": deps}
        if idempotency_key is not None:
            doc["idempotency_key"] = idempotency_key
        if probe:
            doc["probe"] = True
        return list(self.call("POST", "/jobs", json_body=self.body(SUBMIT, doc))["ids"])

    def jobs(
        self,
        *,
        user: str | None = None,
        queue: str | None = None,
        state: str | None = None,
        limit: int = 200,
        all_states: bool = False,
        brief: bool = False,
    ) -> list[s.JobOut]:
        """Up to ``limit`` jobs, newest first, following the server's pages (``Link: <…>;
        rel="next"``; a page holds at most PAGE_MAX jobs). ``brief``: each spec holds only
        what a listing prints (server/listing.py's BRIEF_SPEC)."""
        params = {"user": user, "queue": queue, "state": state,
                  "limit": min(limit, PAGE_MAX), "all": str(all_states).lower(),
                  "brief": "true" if brief else None}  # fmt: skip
        out: list[s.JobOut] = []
        for rows, _ in self.pages(params, limit):
            out += [self.decode(JOB, x) for x in rows]
        return out[:limit]

    def all_jobs(
        self, *, user: str | None = None, queue: str | None = None, page: int = PAGE_MAX
    ) -> Iterator[s.JobOut]:
        """Every job the token may see, in every state, newest first, one page at a time
        (following ``Link: <…>; rel="next"``): for exports too large for one list."""
        params = {"user": user, "queue": queue, "limit": max(1, min(page, PAGE_MAX)), "all": "true"}
        for rows, _ in self.pages(params):
            yield from (self.decode(JOB, x) for x in rows)

    def job(self, job_id: str) -> s.JobOut:
        return self.one(JOB, "GET", f"/jobs/{segment(job_id)}")

    def cancel(self, job_id: str) -> s.JobOut:
        return self.one(JOB, "POST", f"/jobs/{segment(job_id)}/cancel")

    def hold(self, job_id: str, action: str = "hold") -> s.JobOut:
        """Slurm's scontrol ``hold``, ``uhold`` or ``release`` of the job (ADR 0074)."""
        body = {"action": action}
        return self.one(JOB, "POST", f"/jobs/{segment(job_id)}/hold", json_body=body)

    def logs(
        self, job_id: str, *, rank: int = 0, stream: str = "stdout", offset: int = 0
    ) -> s.LogOut:
        params = {"rank": rank, "stream": stream, "offset": offset}
        return self.one(LOG, "GET", f"/jobs/{segment(job_id)}/logs", params=params)

    def nodes(self) -> list[s.NodeOut]:
        return self.many(NODE, "GET", "/nodes")

    def user_accounts(self, user: str) -> s.UserAccountsOut:
        """What the nodes say of ``user``'s Unix account (admins; ADR 0037)."""
        return self.one(USER_ACCOUNTS, "GET", f"/accounts/{segment(user)}")

    def node_history(self, node: str, events: int = 50) -> dash.NodeHistoryOut:
        """The node's state, reason and newest events (and its GPU metrics over time)."""
        path = f"/nodes/{segment(node)}/history"
        return self.one(NODE_HISTORY, "GET", path, params={"events": events})

    def drain(
        self, node: str, reason: str = "drained by admin", deadline_s: float | None = None
    ) -> s.NodeOut:
        """``deadline_s``: what still runs there then is stopped with its checkpoint notice
        and requeued."""
        fields: dict[str, Any] = {"reason": reason}
        if deadline_s is not None:
            fields["deadline_s"] = deadline_s
        body = self.body(DRAIN, fields)
        return self.one(NODE, "POST", f"/nodes/{node}/drain", json_body=body)

    def resume(self, node: str) -> s.NodeOut:
        return self.one(NODE, "POST", f"/nodes/{node}/resume")

    def run_on_node(
        self, node: str, command: str, *, timeout_s: float = 600.0, why: str = "", wait_s: float = 0
    ) -> nc.NodeCommandOut:
        """An operator's shell command on ``node``, run by its agent (admins); ``wait_s``: await
        its end that long (its output and exit code)."""
        body = {"command": command, "timeout_s": timeout_s, "why": why}
        return self.one(
            NODE_COMMAND,
            "POST",
            f"/nodes/{segment(node)}/commands",
            json_body=body,
            params={"wait": wait_s},
            timeout=wait_s + 30.0,
        )

    def node_command(self, cid: str, wait_s: float = 0) -> nc.NodeCommandOut:
        return self.one(
            NODE_COMMAND,
            "GET",
            f"/node-commands/{segment(cid)}",
            params={"wait": wait_s},
            timeout=wait_s + 30.0,
        )

    def node_commands(self, node: str) -> list[nc.NodeCommandOut]:
        return self.many(NODE_COMMAND, "GET", f"/nodes/{segment(node)}/commands")

    def start_maintenance(self, body: dict[str, Any]) -> mt.MaintenanceOut:
        """A rolling maintenance (``api/maintenance.py``'s MaintenanceCreate, as JSON)."""
        return self.one(MAINTENANCE, "POST", "/maintenance", json_body=body)

    def maintenances(self) -> list[mt.MaintenanceOut]:
        return self.many(MAINTENANCE, "GET", "/maintenance")

    def maintenance(self, mid: str) -> mt.MaintenanceOut:
        return self.one(MAINTENANCE, "GET", f"/maintenance/{segment(mid)}")

    def confirm_maintenance(self, mid: str) -> mt.MaintenanceOut:
        return self.one(MAINTENANCE, "POST", f"/maintenance/{segment(mid)}/confirm")

    def cancel_maintenance(self, mid: str) -> mt.MaintenanceOut:
        return self.one(MAINTENANCE, "POST", f"/maintenance/{segment(mid)}/cancel")

    def queues(self) -> list[s.QueueOut]:
        return self.many(QUEUE, "GET", "/queues")

    def update_queue(self, name: str, update: s.QueueUpdate) -> s.QueueOut:
        body = update.model_dump(exclude_none=True)
        return self.one(QUEUE, "PUT", f"/queues/{name}", json_body=body)

    def create_reservation(self, body: dict[str, Any]) -> resv.ReservationOut:
        """An advance reservation (``api/reservations.py``'s ReservationCreate, as JSON)."""
        return self.one(RESERVATION, "POST", "/reservations", json_body=body)

    def reservations(self) -> list[resv.ReservationOut]:
        return self.many(RESERVATION, "GET", "/reservations")

    def reservation(self, name: str) -> resv.ReservationOut:
        return self.one(RESERVATION, "GET", f"/reservations/{segment(name)}")

    def delete_reservation(self, name: str) -> None:
        self.call("DELETE", f"/reservations/{segment(name)}")

    def accounting(
        self, *, since: float | None = None, until: float | None = None, by: str = "user"
    ) -> list[s.AccountingRow]:
        params = {"since": since, "until": until, "by": by}
        return self.many(ACCOUNTING, "GET", "/accounting", params=params)

    def fairness(
        self, *, since: float | None = None, until: float | None = None
    ) -> acc.EntitlementOut:
        params = {"since": since, "until": until}
        return self.one(ENTITLEMENT, "GET", "/accounting/fairness", params=params)

    def create_token(self, req: s.TokenCreate) -> s.TokenOut:
        return self.one(TOKEN, "POST", "/tokens", json_body=req.model_dump())

    def tokens(self) -> list[s.TokenOut]:
        return self.many(TOKEN, "GET", "/tokens")

    def revoke_token(self, name: str) -> None:
        self.call("DELETE", f"/tokens/{name}")

    def create_secret(self, req: sec.SecretCreate) -> sec.SecretOut:
        """The value goes in the request body only (never a URL or argv)."""
        return self.one(SECRET, "POST", "/secrets", json_body=req.model_dump())

    def secrets(self, scope: str | None = None) -> list[sec.SecretOut]:
        return self.many(SECRET, "GET", "/secrets", params={"scope": scope or None})

    def delete_secret(
        self, name: str, scope: str = "user", *, user: str | None = None, queue: str | None = None
    ) -> None:
        params = {"scope": scope, "user": user or None, "queue": queue or None}
        self.call("DELETE", f"/secrets/{name}", params=params)

    def create_service(self, spec: dict[str, Any]) -> svc.ServiceOut:
        return self.one(SERVICE, "POST", "/services", json_body={"spec": spec})

    def services(self) -> list[svc.ServiceOut]:
        return self.many(SERVICE, "GET", "/services")

    def service(self, name: str, events: int = 50) -> svc.ServiceOut:
        return self.one(SERVICE, "GET", f"/services/{name}", params={"events": events})

    def update_service(
        self, name: str, spec: dict[str, Any], *, replace: bool = False
    ) -> svc.ServiceOut:
        """``replace``: the whole new spec (PUT); else a JSON merge patch of it (PATCH)."""
        method = "PUT" if replace else "PATCH"
        return self.one(SERVICE, method, f"/services/{name}", json_body={"spec": spec})

    def scale_service(
        self,
        name: str,
        replicas: int | None = None,
        *,
        minimum: int | None = None,
        maximum: int | None = None,
    ) -> svc.ServiceOut:
        given = (("replicas", replicas), ("min", minimum), ("max", maximum))
        body = {k: v for k, v in given if v is not None}
        return self.one(SERVICE, "POST", f"/services/{name}/scale", json_body=body)

    def rotate_service_token(self, name: str) -> svc.ServiceOut:
        """A new endpoint token (in ``endpoint.token`` of the answer, and nowhere else)."""
        return self.one(SERVICE, "POST", f"/services/{name}/token")

    def delete_service(self, name: str) -> None:
        self.call("DELETE", f"/services/{name}")

    def audit(self, limit: int = 100) -> list[s.AuditOut]:
        return self.many(AUDIT, "GET", "/audit", params={"limit": limit})

    def health(self) -> dict[str, Any]:
        """``/healthz``'s answer, whatever its status (503: not ready, and why)."""
        r = self.transport.request("GET", self.base + "/healthz", self.headers)
        return dict(jsonc.loads(r.body))
