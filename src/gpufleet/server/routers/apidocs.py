"""``/api/v1/docs``: Swagger UI for the OpenAPI document, every file of it served by the
controller itself (``server/swagger_ui``, vendored), none from a CDN: the page works on a
cluster with no way out, and its Content-Security-Policy lets the browser load nothing from
anywhere else. No ReDoc (FastAPI's would load from a CDN)."""

from __future__ import annotations

from importlib.resources import files

from fastapi import APIRouter, FastAPI, HTTPException, Response
from fastapi.openapi.docs import get_swagger_ui_html

from gpufleet.server.swagger_ui import FILES

STATIC = files("gpufleet.server.swagger_ui")
# the page's own inline script starts Swagger UI, which sets inline styles; everything it
# loads and every call it makes goes to this controller
CSP = (
    "default-src 'none'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; connect-src 'self'; font-src 'self' data:; base-uri 'none'; "
    "form-action 'none'; frame-ancestors 'none'"
)


def install(app: FastAPI, api: str) -> None:
    """The docs page at ``{api}/docs`` and its files under ``{api}/docs/``."""
    assets = f"{api}/docs"
    router = APIRouter(include_in_schema=False)

    @router.get(f"{api}/docs")
    async def docs() -> Response:
        page = get_swagger_ui_html(
            openapi_url=f"{api}/openapi.json",
            title="gpufleet API",
            swagger_js_url=f"{assets}/swagger-ui-bundle.js",
            swagger_css_url=f"{assets}/swagger-ui.css",
            swagger_favicon_url=f"{assets}/favicon-32x32.png",
            # Swagger UI's validator badge would load an image from validator.swagger.io
            swagger_ui_parameters={"validatorUrl": None},
        )
        page.headers["Content-Security-Policy"] = CSP
        page.headers["X-Content-Type-Options"] = "nosniff"
        return page

    @router.get(f"{assets}/{{name}}")
    async def asset(name: str) -> Response:
        if name not in FILES:
            raise HTTPException(404, f"no docs file {name}")
        headers = {"Cache-Control": "public, max-age=86400", "X-Content-Type-Options": "nosniff"}
        return Response((STATIC / name).read_bytes(), media_type=FILES[name], headers=headers)

    app.include_router(router)
