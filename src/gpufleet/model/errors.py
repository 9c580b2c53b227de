"""The one error type for refused input: it names where (file, field) and what is wrong."""

from __future__ import annotations


class SpecError(ValueError):
    """Input from outside (a spec, a trace row, a request) was refused.

    ``source`` is the file (or "request", "<string>"), ``field`` a dotted path such as
    ``pools[2].gpu_model`` or ``line 17: num_gpus``; the message says what was wrong.
    """

    def __init__(self, message: str, *, source: str = "", field: str = "") -> None:
        self.source = source
        self.field = field
        self.reason = message
        where = ": ".join(p for p in (source, field) if p)
        super().__init__(f"{where}: {message}" if where else message)

    def at(self, source: str) -> SpecError:
        """The same error, located in ``source`` (kept when already located)."""
        return SpecError(self.reason, source=self.source or source, field=self.field)
