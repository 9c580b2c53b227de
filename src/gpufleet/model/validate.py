"""Small typed readers for dict-shaped input; each raises SpecError naming the field."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gpufleet.model.errors import SpecError


class Fields:
    """Reads one mapping of input, remembering which keys were read.

    ``finish()`` refuses the keys nobody asked for, so a typo is an error, not a silent default.
    """

    def __init__(self, data: Any, *, source: str, path: str) -> None:
        if not isinstance(data, Mapping):
            raise SpecError(
                f"expected a mapping, got {type(data).__name__}", source=source, field=path
            )
        self.data: Mapping[str, Any] = data
        self.source = source
        self.path = path
        self._seen: set[str] = set()

    def field(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def error(self, key: str, message: str) -> SpecError:
        return SpecError(message, source=self.source, field=self.field(key))

    def _get(self, key: str, required: bool) -> Any:
        self._seen.add(key)
        if key not in self.data or self.data[key] is None:
            if required:
                raise self.error(key, "is required")
            return None
        return self.data[key]

    def raw(self, key: str) -> Any:
        """The value as given (None when absent), marked as read."""
        return self._get(key, False)

    def has(self, key: str) -> bool:
        return key in self.data and self.data[key] is not None

    def text(self, key: str, default: str | None = None, *, required: bool = False) -> str:
        v = self._get(key, required and default is None)
        if v is None:
            return default if default is not None else ""
        if not isinstance(v, str) or not v.strip():
            raise self.error(key, f"must be a non-empty string, got {v!r}")
        return v.strip()

    def integer(
        self,
        key: str,
        default: int | None = None,
        *,
        minimum: int | None = None,
        maximum: int | None = None,
    ) -> int:
        v = self._get(key, default is None)
        if v is None:
            assert default is not None
            return default
        if isinstance(v, bool) or not isinstance(v, int):
            if isinstance(v, float) and v.is_integer():
                v = int(v)
            else:
                raise self.error(key, f"must be an integer, got {v!r}")
        if minimum is not None and v < minimum:
            raise self.error(key, f"must be at least {minimum}, got {v}")
        if maximum is not None and v > maximum:
            raise self.error(key, f"must be at most {maximum}, got {v}")
        return int(v)

    def number(
        self, key: str, default: float | None = None, *, minimum: float | None = None
    ) -> float:
        v = self._get(key, default is None)
        if v is None:
            assert default is not None
            return default
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise self.error(key, f"must be a number, got {v!r}")
        if minimum is not None and v < minimum:
            raise self.error(key, f"must be at least {minimum}, got {v}")
        return float(v)

    def flag(self, key: str, default: bool) -> bool:
        v = self._get(key, False)
        if v is None:
            return default
        if not isinstance(v, bool):
            raise self.error(key, f"must be true or false, got {v!r}")
        return v

    def items(self, key: str) -> list[Any]:
        v = self._get(key, False)
        if v is None:
            return []
        if not isinstance(v, list):
            raise self.error(key, f"must be a list, got {type(v).__name__}")
        return v

    def names(self, key: str) -> tuple[str, ...]:
        v = self._get(key, False)
        if v is None:
            return ()
        if isinstance(v, str):
            v = [p for p in v.replace("|", ",").split(",") if p.strip()]
        if not isinstance(v, list) or not all(isinstance(x, str) and x.strip() for x in v):
            raise self.error(key, f"must be a list of names, got {v!r}")
        return tuple(x.strip() for x in v)

    def mapping(self, key: str) -> dict[str, Any]:
        v = self._get(key, False)
        if v is None:
            return {}
        if not isinstance(v, Mapping):
            raise self.error(key, f"must be a mapping, got {type(v).__name__}")
        return dict(v)

    def labels(self, key: str) -> dict[str, str]:
        raw = self.mapping(key)
        out: dict[str, str] = {}
        for k, v in raw.items():
            if not isinstance(k, str) or isinstance(v, dict | list):
                raise self.error(key, f"label {k!r} must map a name to a plain value")
            out[k] = str(v)
        return out

    def finish(self) -> None:
        unknown = sorted(str(k) for k in self.data if k not in self._seen)
        if unknown:
            raise self.error(unknown[0], f"unknown key (allowed: {', '.join(sorted(self._seen))})")


def require_unique(names: Iterable[str], *, source: str, field: str, what: str) -> None:
    seen: set[str] = set()
    for n in names:
        if n in seen:
            raise SpecError(f"duplicate {what} name {n!r}", source=source, field=field)
        seen.add(n)
