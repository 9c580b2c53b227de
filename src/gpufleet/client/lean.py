"""A client over a plain socket (``wire.py``), for the Slurm shims and ``gpufleet jobs``'s fast
path (issue 12): the same endpoints and names as ``client.http.Client``, without httpx and
pydantic, whose imports alone cost a command most of its 150 ms (and without ``http.client``,
which imports the ``email`` package). Answers are ``Row``s: the server's JSON, with its
fields readable as attributes (``job.state``, ``job.reason.code``), as on the typed models."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from gpufleet.base.settings import Settings
from gpufleet.client.errors import ApiError
from gpufleet.client.wire import Connection

API = "/api/v1"
PAGE_MAX = 1000  # the server's largest page of GET /jobs (server/listing.py)
_NEXT = re.compile(r'<([^>]*)>\s*;\s*rel="?next"?')


class Row(dict[str, Any]):
    """A JSON object whose keys read as attributes too."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


class LeanClient:
    def __init__(self, settings: Settings, timeout: float = 30.0) -> None:
        u = urlsplit(settings.server)
        self.base = u.path.rstrip("/")
        self.headers = {"Accept": "application/json", "Accept-Encoding": "identity"}
        if settings.token:
            self.headers["Authorization"] = f"Bearer {settings.token}"
        https = u.scheme == "https"
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"server {settings.server!r}: not an http(s)://host[:port] URL")
        self.conn = Connection(
            u.hostname,
            u.port or (443 if https else 80),
            https=https,
            ca=settings.ca,
            timeout=timeout,
        )

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> LeanClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _send(
        self, method: str, path: str, params: dict[str, Any] | None = None, body: Any = None
    ) -> tuple[Any, str | None]:
        """(the answer's JSON, the URL path of its next page)."""
        if params:
            q = urlencode({k: v for k, v in params.items() if v is not None})
            path = f"{path}?{q}" if q else path
        headers = dict(self.headers)
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        r = self.conn.request(method, path, headers, data)
        raw = r.body
        if r.status >= 400:
            try:
                doc = json.loads(raw, object_hook=Row) if raw else None
            except ValueError:  # a proxy's HTML page, say: its text is the detail
                doc = None
            text = raw.decode("utf-8", "replace")
            detail = doc.get("detail", text) if isinstance(doc, dict) else text
            raise ApiError(r.status, detail)
        doc = json.loads(raw, object_hook=Row) if raw else None
        m = _NEXT.search(r.headers.get("link", ""))
        nxt = None
        if m:
            n = urlsplit(m.group(1))
            nxt = f"{n.path}?{n.query}" if n.query else n.path
        return doc, nxt

    def _call(self, method: str, path: str, **kw: Any) -> Any:
        return self._send(method, self.base + API + path, **kw)[0]

    def submit(
        self,
        spec: dict[str, Any],
        *,
        array: str | None = None,
        depends_on: Sequence[tuple[str, str]] = (),
    ) -> list[str]:
        deps = [{"type": t, "job": j} for t, j in depends_on]
        body = {"spec": spec, "array": array, "depends_on": deps}
        return list(self._call("POST", "/jobs", body=body)["ids"])

    def jobs(
        self,
        *,
        user: str | None = None,
        queue: str | None = None,
        state: str | None = None,
        limit: int = 200,
        all_states: bool = False,
    ) -> list[Row]:
        """Up to ``limit`` jobs, newest first, following the server's pages."""
        params: dict[str, Any] | None = {
            "user": user,
            "queue": queue,
            "state": state,
            "limit": min(limit, PAGE_MAX),
            "all": str(all_states).lower(),
        }
        path: str | None = self.base + API + "/jobs"
        out: list[Row] = []
        while path is not None and len(out) < limit:
            page, path = self._send("GET", path, params)
            out += page
            params = None  # the next page's URL carries every parameter
        return out[:limit]

    def all_jobs(self, *, user: str | None = None, page: int = PAGE_MAX) -> Iterator[Row]:
        """Every job the token may see, in every state, newest first, one page at a time."""
        params: dict[str, Any] | None = {"user": user, "limit": page, "all": "true"}
        path: str | None = self.base + API + "/jobs"
        while path is not None:
            rows, path = self._send("GET", path, params)
            yield from rows
            params = None

    def job(self, job_id: str) -> Row:
        return self._call("GET", f"/jobs/{quote(job_id, safe='')}")  # type: ignore[no-any-return]

    def cancel(self, job_id: str) -> Row:
        return self._call("POST", f"/jobs/{quote(job_id, safe='')}/cancel")  # type: ignore[no-any-return]

    def nodes(self) -> list[Row]:
        return list(self._call("GET", "/nodes"))

    def queues(self) -> list[Row]:
        return list(self._call("GET", "/queues"))
