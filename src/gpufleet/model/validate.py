"""Small typed readers for dict-shaped input; each raises SpecError naming the field."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from gpufleet.model.errors import SpecError, every

# Bounds of every string read from outside. A name is short; a command argument may carry a
# probe program (``ops/probes`` packs ~50 kB into ``python3 -c``); the request body limit
# (1 MiB by default) bounds the sum.
MAX_NAME = 256
MAX_TEXT = 4096  # paths, reasons, label values
MAX_ARG = 256 * 1024  # one command argument
MAX_COMMAND = 512 * 1024  # all arguments together
MAX_ITEMS = 1024  # arguments of a command, entries of env or labels
MAX_ENV_VALUE = 64 * 1024
MAX_ENV = 256 * 1024  # all env keys and values together
MAX_NUMBER = 1e15  # a finite number beyond any quantity a cluster has (GPUs, seconds, GiB)


def text_problem(value: str, max_len: int = MAX_TEXT) -> str | None:
    """What makes ``value`` unfit to store or pass to a process, or None.

    A NUL byte ends a C string (an exec argument, an env value, a PostgreSQL text); a lone
    surrogate is not Unicode, so it cannot be encoded for the store or a response."""
    if "\x00" in value:
        return "must not contain a NUL byte (\\u0000)"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        return f"must be valid Unicode (a lone surrogate at character {e.start})"
    if len(value) > max_len:
        return f"must be at most {max_len} characters, got {len(value)}"
    return None


def control_problem(value: str) -> str | None:
    """Whether ``value`` holds a control character (C0, DEL, C1, Unicode's bidirectional
    controls and line separators), or None.

    For text that other people's terminals print (a job's name in squeue, sacct and the
    dashboard): an escape sequence in it would be run by the terminal of the admin who lists
    the jobs (ESC ] 0; sets its title, ESC [ 2 J clears it)."""
    for i, ch in enumerate(value):
        if ch < " " or "\x7f" <= ch <= "\x9f" or ch in _FORMAT_CONTROLS:
            return f"must not contain a control character (U+{ord(ch):04X} at character {i})"
    return None


# Unicode's own controls a terminal or a browser obeys: the bidirectional ones (U+202E shows
# "gpj.exe" as "exe.jpg", and the rest of the line reversed) and the line and paragraph
# separators (a second line where one is printed)
_FORMAT_CONTROLS = frozenset(
    "\u061c\u200e\u200f\u2028\u2029\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
)


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

    def text(
        self,
        key: str,
        default: str | None = None,
        *,
        required: bool = False,
        max_len: int = MAX_NAME,
        line: bool = False,
    ) -> str:
        """The text at ``key``, stripped; ``line``: one line that others' terminals print (a
        name, a path, a queue), so without a control character (``control_problem``)."""
        v = self._get(key, required and default is None)
        if v is None:
            return default if default is not None else ""
        if not isinstance(v, str) or not v.strip():
            raise self.error(key, f"must be a non-empty string, got {v!r}")
        v = self.checked(key, v, max_len).strip()
        if line and (problem := control_problem(v)):
            raise self.error(key, problem)
        return v

    def checked(self, key: str, value: str, max_len: int = MAX_TEXT, line: bool = False) -> str:
        """``value`` (read at ``key``) if it is fit to store (and, ``line``, to print), else a
        SpecError naming it."""
        problem = text_problem(value, max_len) or (control_problem(value) if line else None)
        if problem:
            raise self.error(key, problem)
        return value

    def integer(
        self,
        key: str,
        default: int | None = None,
        *,
        minimum: int | None = None,
        maximum: int | None = None,
    ) -> int:
        # without a maximum, still one an int64 column holds
        v = self._get(key, default is None)
        if v is None:
            assert default is not None
            return default
        if isinstance(v, bool) or not isinstance(v, int):
            if isinstance(v, float) and math.isfinite(v) and v.is_integer():
                v = int(v)
            else:
                raise self.error(key, f"must be an integer, got {v!r}")
        if minimum is not None and v < minimum:
            raise self.error(key, f"must be at least {minimum}, got {v}")
        top = maximum if maximum is not None else 2**63 - 1
        if v > top:
            raise self.error(key, f"must be at most {top}, got {v}")
        if minimum is None and v < -(2**63):
            raise self.error(key, f"must be at least {-(2**63)}, got {v}")
        return int(v)

    def number(
        self,
        key: str,
        default: float | None = None,
        *,
        minimum: float | None = None,
        maximum: float = MAX_NUMBER,
    ) -> float:
        v = self._get(key, default is None)
        if v is None:
            assert default is not None
            return default
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise self.error(key, f"must be a number, got {v!r}")
        try:
            f = float(v)
        except OverflowError:  # an int too large for a float
            raise self.error(key, f"must be at most {maximum:g}, got {v}") from None
        if not math.isfinite(f):
            raise self.error(key, f"must be a finite number, got {v}")
        if minimum is not None and f < minimum:
            raise self.error(key, f"must be at least {minimum}, got {v}")
        if f > maximum:
            raise self.error(key, f"must be at most {maximum:g}, got {v}")
        return f

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
            raise self.error(key, f"must be a list of names, got {v!r}"[:300])
        if len(v) > MAX_ITEMS:
            raise self.error(key, f"must have at most {MAX_ITEMS} names, got {len(v)}")
        return tuple(self.checked(f"{key}[{i}]", x, MAX_NAME).strip() for i, x in enumerate(v))

    def mapping(self, key: str) -> dict[str, Any]:
        v = self._get(key, False)
        if v is None:
            return {}
        if not isinstance(v, Mapping):
            raise self.error(key, f"must be a mapping, got {type(v).__name__}")
        return dict(v)

    def labels(
        self, key: str, *, max_key: int = MAX_NAME, max_value: int = MAX_TEXT
    ) -> dict[str, str]:
        raw = self.mapping(key)
        if len(raw) > MAX_ITEMS:
            raise self.error(key, f"must have at most {MAX_ITEMS} entries, got {len(raw)}")
        out: dict[str, str] = {}
        for k, v in raw.items():
            if not isinstance(k, str) or isinstance(v, dict | list):
                raise self.error(key, f"label {str(k)[:100]!r} must map a name to a plain value")
            if isinstance(v, float) and not math.isfinite(v):
                raise self.error(f"{key}.{k}", f"must be a finite number, got {v}")
            self.checked(f"{key}.{k[:100]}", k, max_key)
            out[k] = self.checked(f"{key}.{k}", str(v), max_value)
        return out

    def finish(self) -> None:
        """Refuse every key nobody read, each with the known key it is closest to."""
        unknown = sorted(str(k) for k in self.data if k not in self._seen)
        if not unknown:
            return
        known = sorted(self._seen)
        allowed = ", ".join(known)
        errors = [
            self.error(k, f"unknown key{close}" if close else f"unknown key (allowed: {allowed})")
            for k in unknown
            for close in [did_you_mean(k, known)]
        ]
        raise every(errors)


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """`` (did you mean X?)`` for the choice closest to a mistyped ``word``, else ""."""
    options = list(choices)
    longer = sorted((c for c in options if c.startswith(word) and word), key=len)
    if longer:  # a name cut short (gpus: gpus_per_worker)
        return f" (did you mean {longer[0]!r}?)"
    import difflib  # only on a mistake: the sbatch shim reads specs without it

    close = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def require_unique(names: Iterable[str], *, source: str, field: str, what: str) -> None:
    seen: set[str] = set()
    for n in names:
        if n in seen:
            raise SpecError(f"duplicate {what} name {n!r}", source=source, field=field)
        seen.add(n)
