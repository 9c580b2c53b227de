"""JSON through the interpreter's own C accelerator (``_json``), without importing ``json``.

``json``'s decoder and encoder modules import ``re``, and ``re`` imports ``enum``: together
about 5 ms of CPU, half of what a Slurm shim spends beyond the interpreter's own start (issue
27). ``_json``'s scanner and encoder are what ``json.loads`` and ``json.dumps`` run anyway; this
module builds them as ``json`` does, with ``json``'s defaults, so the text and the values are the
same (tests/unit/test_jsonc.py compares them). Without ``_json`` (another interpreter), or for a
malformed document (the scanner imports ``json.decoder`` to raise its ``JSONDecodeError``), it
is ``json`` after all."""

from __future__ import annotations

TYPE_CHECKING = False  # no typing at run time (issue 27)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

try:
    import _json
except ImportError:  # pragma: no cover - CPython always has it
    _json = None  # type: ignore[assignment]

_WS = " \t\n\r"  # JSON's whitespace (RFC 8259)
_CONSTANTS = {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}


class _Context:
    """What ``_json.make_scanner`` reads of a ``json.JSONDecoder``: its defaults."""

    __slots__ = (
        "memo",
        "object_hook",
        "object_pairs_hook",
        "parse_constant",
        "parse_float",
        "parse_int",
        "strict",
    )

    def __init__(self, object_hook: Callable[[dict[str, Any]], Any] | None) -> None:
        self.object_hook = object_hook
        self.object_pairs_hook = None
        self.parse_float = float
        self.parse_int = int
        self.parse_constant = _CONSTANTS.__getitem__
        self.strict = True
        self.memo: dict[str, str] = {}


_scanners: dict[Any, Any] = {}


def loads(doc: str | bytes, object_hook: Callable[[dict[str, Any]], Any] | None = None) -> Any:
    """``json.loads(doc, object_hook=object_hook)`` (``doc`` as UTF-8 when bytes)."""
    text = doc.decode("utf-8") if isinstance(doc, bytes | bytearray) else doc
    if _json is None:
        return _slow_loads(text, object_hook)
    scan = _scanners.get(object_hook)
    if scan is None:
        scan = _scanners[object_hook] = _json.make_scanner(_Context(object_hook))  # type: ignore[arg-type]
    start = len(text) - len(text.lstrip(_WS))
    try:
        value, end = scan(text, start)
    except StopIteration:  # no value where one begins: json's own error message
        return _slow_loads(text, object_hook)
    if text[end:].strip(_WS):  # extra data after the value
        return _slow_loads(text, object_hook)
    return value


def _slow_loads(text: str, object_hook: Callable[[dict[str, Any]], Any] | None) -> Any:
    import json

    return json.loads(text, object_hook=object_hook)


def _default(o: object) -> Any:
    raise TypeError(f"Object of type {o.__class__.__name__} is not JSON serializable")


_encoder: Any = None


def dumps(obj: Any) -> str:
    """``json.dumps(obj, ensure_ascii=False)``."""
    global _encoder
    if _json is None or not hasattr(_json, "make_encoder"):
        import json

        return json.dumps(obj, ensure_ascii=False)
    if _encoder is None:
        _encoder = _json.make_encoder(
            {}, _default, _json.encode_basestring, None, ": ", ", ", False, False, True
        )
    return "".join(_encoder(obj, 0))
