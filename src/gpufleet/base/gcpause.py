"""The cyclic garbage collector paused around work that makes many short-lived objects and no
cycles (a metrics scrape, the store's read-back): the collections they would set off walk the
whole heap again and again, and reference counting frees those objects anyway."""

from __future__ import annotations

import gc
from types import TracebackType


class gc_paused:  # lower case: read as a function is, ``with gc_paused():``
    """No automatic collection inside; the collector as it was after (a caller that had it
    off keeps it off). A class, not a generator: a generator's own exit, after the collector
    is back on, would allocate and so set off the collection that the work postponed there
    and then, inside the caller's ``with``."""

    def __enter__(self) -> None:
        self.was = gc.isenabled()
        gc.disable()

    def __exit__(
        self, kind: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.was:
            gc.enable()
