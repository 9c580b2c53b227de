"""One error shape for every 4xx and 5xx (``schemas.ErrorOut``): ``detail`` for people,
``errors`` (field, message) for programs, and the same in the OpenAPI schema. The service's
refusals get their status from ``refusals.STATUS``."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable, Mapping
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from gpufleet.api.bounds import Problems, safe
from gpufleet.model.errors import SpecError, each
from gpufleet.server.refusals import RETRY_AFTER_S, RequestError, Unavailable
from gpufleet.server.store.records import StoreUnavailable

log = logging.getLogger("gpufleet.controller")
_UNPARSED = "There was an error parsing the body"  # FastAPI's words (fastapi/routing.py)


class FieldErrors(HTTPException):
    """Refused input: one or more (field, message)."""

    def __init__(self, problems: Iterable[tuple[str, str]], status: int = 422) -> None:
        self.problems = [(safe(f), safe(m)) for f, m in problems]
        super().__init__(status, "; ".join(f"{f}: {m}" if f else m for f, m in self.problems))


def error_response(
    status: int,
    detail: str,
    problems: Iterable[tuple[str, str]] = (),
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    body = {
        "detail": safe(detail),
        "errors": [{"field": safe(f), "message": safe(m)} for f, m in problems],
    }
    return JSONResponse(body, status_code=status, headers=headers)


def _where(loc: Iterable[Any]) -> str:
    return ".".join(safe(str(x)) for x in loc)


def _validation_problems(e: RequestValidationError) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for err in e.errors():
        where = _where(err.get("loc", ()))
        cause = (err.get("ctx") or {}).get("error")
        if isinstance(cause, Problems):  # several, each below the field
            out += [(f"{where}.{p}" if p else where, m) for p, m in cause.problems]
            continue
        msg = str(err.get("msg", "invalid"))
        msg = msg.removeprefix("Value error, ")
        out.append((where, msg))  # never the input itself: it may not be encodable
    return out


_RETRY = {"Retry-After": str(RETRY_AFTER_S)}


def _unreadable(cause: BaseException | None) -> str:
    """Why json.loads could not read a body (FastAPI keeps its error as the cause)."""
    if isinstance(cause, RecursionError):  # Python's parser stops at its recursion limit
        return "cannot be read: JSON nested too deep (arrays or objects in one another)"
    if isinstance(cause, ValueError) and "digits" in str(cause):  # sys.get_int_max_str_digits
        return f"cannot be read: a whole number of more than {_MAX_DIGITS} digits"
    return "cannot be read: not UTF-8 encoded JSON"


_MAX_DIGITS = sys.get_int_max_str_digits()  # what json.loads reads of one integer (4300)


def install(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, e: RequestValidationError) -> JSONResponse:
        problems = _validation_problems(e)
        return error_response(422, "; ".join(f"{f}: {m}" for f, m in problems), problems)

    @app.exception_handler(SpecError)
    async def _spec(_: Request, e: SpecError) -> JSONResponse:
        problems = [(x.field, x.reason) for x in each(e) if x.field]
        return error_response(422, "; ".join(str(x) for x in each(e)), problems)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, e: StarletteHTTPException) -> JSONResponse:
        problems = e.problems if isinstance(e, FieldErrors) else []
        if e.status_code == 400 and e.detail == _UNPARSED:
            # FastAPI's answer to a body json.loads could not read: refused input like any other
            msg = _unreadable(e.__cause__)
            return error_response(422, f"body: {msg}", [("body", msg)])
        return error_response(e.status_code, str(e.detail), problems, e.headers)

    @app.exception_handler(StoreUnavailable)
    async def _store_unavailable(_: Request, e: StoreUnavailable) -> JSONResponse:
        # the store is down (or the controller rebuilding from it): nothing was done, retry
        return error_response(503, str(e), headers=_RETRY)

    @app.exception_handler(RequestError)
    async def _refused(_: Request, e: RequestError) -> JSONResponse:
        return error_response(
            e.status, str(e), headers=_RETRY if isinstance(e, Unavailable) else None
        )

    @app.exception_handler(Exception)
    async def _crash(request: Request, e: Exception) -> JSONResponse:
        # the same shape as every other error; the cause goes to the log, not to the caller
        log.exception("%s %r failed", request.method, request.url.path)  # %r: no forged lines
        return error_response(500, "internal error: the controller's log has the cause")


# ----- the OpenAPI schema ---------------------------------------------------------------------

_WHAT = {
    400: "A command line the command itself refuses (sbatch's words)",
    401: "Missing, invalid or revoked bearer token",
    403: "The token's role or owner may not do this",
    404: "No such job, node or token",
    409: "Conflicts with the current state",
    413: "The request body is over the controller's --max-body-bytes",
    428: "Send again with what ``errors`` names (the script, or read it where typed)",
    422: "Refused input: every problem, each naming its field",
    429: "Too many failed authentications from this client; retry later",
    503: "The controller cannot serve this now (its store is unavailable); retry",
}


def _refer(node: Any, mark: str) -> None:
    """Replace, in place, each ``{mark: NAME}`` below ``node`` with a $ref to that component."""
    if isinstance(node, dict):
        for k, v in node.items():
            if isinstance(v, dict) and mark in v:
                node[k] = {"$ref": f"#/components/schemas/{v[mark]}"}
            else:
                _refer(v, mark)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            if isinstance(v, dict) and mark in v:
                node[i] = {"$ref": f"#/components/schemas/{v[mark]}"}
            else:
                _refer(v, mark)


def document(
    app: FastAPI,
    prefix: str,
    conflicts: set[tuple[str, str]],
    extra: Mapping[tuple[str, str], set[int]] | None = None,
    schemes: Mapping[str, dict[str, Any]] | None = None,
) -> None:
    """List on every operation the errors it may return, with ErrorOut as their body: 401,
    403 and 429 where it takes a bearer token (its ``security``), 503 under ``prefix`` (the
    store), 422 where it reads parameters or a body, 404 with path parameters, 413 with a
    body, 409 for the (method, path) in ``conflicts``, and what ``extra`` adds; ``schemes``:
    security schemes that operations name by hand (``openapi_extra``). Also: the
    models of fields documented as one (``jobspec.documented_as``), and a check that every
    operation has its own operationId. FastAPI includes routers lazily, so this edits the
    generated schema rather than the routes."""
    from gpufleet.api.jobspec import DOCUMENTED, MARK
    from gpufleet.api.schemas import ErrorOut

    build = app.openapi
    extra = extra or {}

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = build()
        shapes = ErrorOut.model_json_schema(ref_template="#/components/schemas/{model}")
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        components.update(shapes.pop("$defs", {}))
        components["ErrorOut"] = shapes
        for name in ("HTTPValidationError", "ValidationError"):
            components.pop(name, None)
        for name, (model, mode) in DOCUMENTED.items():  # fields documented as a model
            shape = model.model_json_schema(ref_template="#/components/schemas/{model}", mode=mode)
            components.update(shape.pop("$defs", {}))
            components[name] = shape
        _refer(schema, MARK)
        schema["components"].setdefault("securitySchemes", {}).update(schemes or {})
        ref = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorOut"}}}
        ids: dict[str, str] = {}
        for path, ops in schema.get("paths", {}).items():
            for method, op in ops.items():
                where = f"{method.upper()} {path}"
                op_id = op.get("operationId", "")
                if not op_id or op_id in ids:
                    raise RuntimeError(f"{where}: operationId {op_id!r} missing or not unique")
                ids[op_id] = where
                codes = set(extra.get((method.upper(), path), set()))
                if any("bearer" in s for s in op.get("security", [])):
                    codes |= {401, 403, 429}
                if path.startswith(prefix):
                    codes.add(503)
                if op.get("parameters") or "requestBody" in op:
                    codes.add(422)
                else:
                    op.get("responses", {}).pop("422", None)
                if any(p.get("in") == "path" for p in op.get("parameters", [])):
                    codes.add(404)
                if "requestBody" in op:
                    codes.add(413)
                if (method.upper(), path) in conflicts:
                    codes.add(409)
                responses = op.setdefault("responses", {})
                for code in sorted(codes):
                    responses[str(code)] = {"description": _WHAT[code], "content": ref}
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
