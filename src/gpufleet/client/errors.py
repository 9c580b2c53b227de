"""The client's refusal, without httpx or pydantic: the lean client of the Slurm shims raises
it too (issue 12), so code written against ``Client`` handles both."""

from __future__ import annotations

TYPE_CHECKING = False  # no typing at run time: every shim imports this (issue 27)
if TYPE_CHECKING:
    from typing import Any


class ApiError(Exception):
    """A refused request: the HTTP status and the server's explanation."""

    def __init__(self, status: int, detail: Any, errors: Any = ()) -> None:
        self.status = status
        self.detail = detail
        # ErrorOut's problems, for programs: {field: message}
        self.fields = {
            str(p.get("field")): str(p.get("message", ""))
            for p in (errors if isinstance(errors, list) else ())
            if isinstance(p, dict)
        }
        super().__init__(f"{status}: {detail_text(detail)}")


def detail_text(detail: Any) -> str:
    if isinstance(detail, list):  # FastAPI validation errors
        parts = []
        for d in detail:
            loc = ".".join(str(x) for x in d.get("loc", ()) if x != "body")
            parts.append(f"{loc}: {d.get('msg', d)}" if loc else str(d.get("msg", d)))
        return "; ".join(parts)
    return str(detail)
