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


class SpecErrors(SpecError):
    """Every problem of one input at once (``errors``, in the order found); its text is one
    line per problem. Its own ``field`` and ``reason`` are the first problem's."""

    errors: tuple[SpecError, ...]

    def __init__(self, errors: list[SpecError]) -> None:
        first = errors[0]
        super().__init__(first.reason, source=first.source, field=first.field)
        self.errors = tuple(e for x in errors for e in each(x))
        self.args = ("\n".join(str(e) for e in self.errors),)

    def __str__(self) -> str:
        return str(self.args[0])

    def at(self, source: str) -> SpecError:
        return SpecErrors([e.at(source) for e in self.errors])


def every(errors: list[SpecError]) -> SpecError:
    """One error for a list of them: the one, or all of them as SpecErrors."""
    return errors[0] if len(errors) == 1 else SpecErrors(errors)


def each(e: SpecError) -> tuple[SpecError, ...]:
    """The problems an error holds: itself, or each of a SpecErrors'."""
    return e.errors if isinstance(e, SpecErrors) else (e,)
